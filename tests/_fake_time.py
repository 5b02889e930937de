class FakeTime:
    """Deterministic stand-in for the time model (tests of the search machinery only)."""
    def terms(self, setup):
        p, d = setup.plan, setup.deg
        m = setup.micro_batches
        rc = {"none": 1.0, "full": 1.33}.get(p.recompute, 1.1)
        prec = 0.7 if setup.precision == "fp8" else 1.0
        disp = {"alltoall": 1.2, "deepep": 1.0, "hybridep": 0.95, None: 1.0}[p.dispatcher]
        ov = 0.9 if p.ep_overlap == "on" else 1.0
        off = 1.05 if p.offloads_activations else 1.0
        per_mb = 0.01 * rc * prec * disp * ov * off * (1 + 0.1 * d.tp) / d.tp / d.cp * p.mbs / d.pp * (1 + 0.05 * d.ep / 8)
        pipe = (m + (d.pp - 1) / d.vpp) * per_mb
        dp = {"dist_opt": 0.01, "zero2": 0.015, "fsdp": 0.03}[p.sharding_spec.kind] * (1.2 if p.recompute == "none" else 1.0)
        opt = 0.005 * (2.0 if p.offloads_optimizer else 1.0) * (0.9 if p.moments == "bf16" else 1.0)
        return pipe, dp, opt
