"""Predicted against measured collective bandwidth on one NVLink domain.

    python benchmarks/gpu/compare_collectives.py results/validation/multi-gpu-raw/h200x2-collectives.json \
        [--hw h200] [--calibrate]

Prediction: planner's communication model (planner.cost.comm) for a group of the measured size
inside one NVLink domain: ring all-reduce / all-gather / reduce-scatter at the profile's NVLink
bus bandwidth with its latency term, all-to-all at the profile's NCCL all-to-all bandwidth,
send/receive at the point-to-point fraction. The device ran with NVLink multicast (NVLS) off
(NCCL_NVLS_ENABLE=0, the lending tool's setting), so all-reduce is compared with the ring formula.
``--calibrate`` feeds the large-message (>= 16 MiB) medians back as a calibration file
(planner.specs.calibration) and reports the calibrated model too.
"""

from __future__ import annotations

import argparse
import json
import statistics


def predicted_time(op: str, nbytes: float, n: int, rates) -> float:
    """planner's time for one call on ``n`` ranks of one NVLink domain, through the same functions
    the step-time model uses."""
    from planner.cost import comm
    from planner.cost.topology import GroupSpan

    span = GroupSpan(dim="tp", size=n, domains=1, per_domain=n, groups=1, crossing=0)
    if op in ("all_reduce", "all_gather", "reduce_scatter"):
        return float(comm.collective_time(op, nbytes, span, rates))
    if op == "all_to_all":  # one "token" of nbytes to one expert spread over the group
        return float(comm.a2a_time(nbytes, 1.0, 1, span, rates, None))
    # send/receive, as planner.cost.comm.pp_p2p_time prices it inside a domain
    return float(comm.p2p_time(nbytes, rates.nvlink_bw * rates.p2p_fraction,
                               rates.nvlink_latency_s + rates.call("send_recv")))


def measured_rows(data: dict, mode: str = "sync") -> list[dict]:
    """Rows of one timing mode (files from before the back-to-back mode are all 'sync')."""
    return [r for r in data["rows"] if r.get("mode", "sync") == mode]


def rows_for(data: dict, rates, mode: str = "sync") -> list[dict]:
    from benchmarks.gpu.collectives import BUS_FACTOR

    n = data["meta"]["world"]
    out = []
    for r in measured_rows(data, mode):
        t = predicted_time(r["op"], r["bytes"], n, rates)
        pred_bus = r["bytes"] / t * BUS_FACTOR[r["op"]](n)
        out.append({**r, "pred_busbw": pred_bus, "error": pred_bus / r["busbw"] - 1})
    return out


def fit_alpha_beta(rows: list[dict], n: int, min_bytes: int = 16 << 20) -> tuple[float, float]:
    """(latency_s, busbw) of time = latency + bytes x bus factor / busbw over the sizes from
    ``min_bytes`` up, least squares on the relative bandwidth error (the quantity the bound is
    about): a linear fit on relative time error, then Gauss-Newton steps on 1 - t_measured / t."""
    import numpy as np

    from benchmarks.gpu.collectives import BUS_FACTOR

    big = [r for r in rows if r["bytes"] >= min_bytes]
    x = np.array([r["bytes"] * BUS_FACTOR[r["op"]](n) for r in big])
    t = np.array([r["time_s"] for r in big])
    a = np.stack([np.ones_like(x), x], axis=1)
    p, *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
    for _ in range(20):
        pred = a @ p
        resid = 1 - t / pred  # predicted bandwidth / measured - 1 = t / pred - 1 (sign aside)
        jac = (t / pred**2)[:, None] * a
        step, *_ = np.linalg.lstsq(jac, -resid, rcond=None)
        p = p + step
    alpha, inv_bw = float(p[0]), float(p[1])
    return max(alpha, 0.0), 1.0 / inv_bw


def calibration_from(data: dict, hw: str, mode: str = "sync"):
    """A calibration file's collectives from one run: per operation, the alpha-beta fit over the
    messages of 16 MiB and more (the sizes the acceptance bound is about)."""
    from planner.specs.calibration import Calibration

    n = data["meta"]["world"]
    rows = measured_rows(data, mode)
    cols = []
    names = {"sendrecv": "send_recv"}
    for op in sorted({r["op"] for r in rows}):
        latency, busbw = fit_alpha_beta([r for r in rows if r["op"] == op], n)
        cols.append({"op": names.get(op, op), "span": "nvlink", "ranks": n, "busbw": busbw, "latency_s": latency})
    return Calibration(hardware=hw, source=f"benchmarks/gpu/collectives.py on {data['meta'].get('device')} x{n} ({mode})",
                       collectives=cols)


def setup_rates(data: dict, hw: str, calibration=None):
    from planner.cost.rates import rates_for
    from planner.cost.setup import resolve_setup
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.job import Job
    from planner.specs.plan import Plan

    n = data["meta"]["world"]
    setup = resolve_setup(load_model("llama3.1-8b"), load_hardware(hw), Job(gpus=n, global_batch=n, seq_len=4096),
                          Plan.parse(f"tp={n}"))
    return rates_for(setup, calibration)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("measured")
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--mode", default="sync", choices=("sync", "back_to_back"))
    ap.add_argument("--calibrate", action="store_true")
    args = ap.parse_args()
    data = json.load(open(args.measured))
    n = data["meta"]["world"]
    variants = [("model", setup_rates(data, args.hw))]
    if args.calibrate:
        variants.append(("calibrated", setup_rates(data, args.hw, calibration_from(data, args.hw, args.mode))))
    for name, rates in variants:
        rows = rows_for(data, rates, args.mode)
        print(f"\n{name}: {data['meta'].get('device')} x{n} ({args.mode}), bus bandwidth GB/s (measured / predicted, error)")
        big = [r for r in rows if r["bytes"] >= 16 << 20]
        for r in rows:
            print(f"  {r['op']:>14} {r['bytes'] / 2**20:>9.2f} MiB  {r['busbw'] / 1e9:7.1f} / {r['pred_busbw'] / 1e9:7.1f}  {r['error']:+.1%}")
        errs = [abs(r["error"]) for r in big]
        print(f"  >= 16 MiB: max |error| {max(errs):.1%}, median {statistics.median(errs):.1%}")


if __name__ == "__main__":
    main()
