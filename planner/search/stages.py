"""Per-stage decisions with CP-SAT: how many decoder layers each virtual stage holds (an uneven
Megatron layout), and, under ``--target any``, how many layers each pipeline rank fully recomputes.

For a plan whose degrees and levers are fixed, every cost is linear in those counts:
* a rank's constant memory is the sum of its layers' per-GPU parameter bytes;
* a rank's activation peak is, for each in-flight vector of its schedule (the same vectors the
  memory model uses), the sum over chunks of (chunks held) x (the chunk's kept bytes), plus the
  rise of the op's chunk; per-layer kept bytes and transients come from the memory model's pieces,
  and a chunk's rise is bounded by its largest layer transient (an upper bound, so a solution that
  fits here fits the exact model);
* a rank's time per micro-batch is the sum of its layers' times (time model blocks), and the
  step's pipeline term is (m - 1/v) * max_r t_r + sum_r t_r / v, so minimizing the slowest rank's
  time is minimizing the step.
The first ranks hold the most in-flight micro-batches, so the solver moves layers (or adds
recompute) where memory is tight and balances time elsewhere. The result is re-evaluated with the
exact memory and time models and kept only if it fits and is faster.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

KIB = 1024
TIME_UNIT = 1e-8  # 10 ns


@dataclass
class StageRefinement:
    setup: object
    improved: bool
    note: str


def _kinds_prefix(model) -> tuple[int, str, str] | None:
    """(D, first kind, rest kind) when the layers are D of one kind followed by the other kind
    (DeepSeek first_k_dense, or all one kind); None for interleaved patterns."""
    kinds = model.layer_kinds
    first = kinds[0]
    d = 0
    while d < len(kinds) and kinds[d] == first:
        d += 1
    rest = kinds[d] if d < len(kinds) else first
    if any(k != rest for k in kinds[d:]):
        return None
    return d, first, rest


def refine(setup, *, stage_recompute: bool = False, time_limit_s: float = 5.0) -> StageRefinement:
    """Best uneven layout (and per-rank recompute) for ``setup``'s degrees and levers."""
    from ortools.sat.python import cp_model

    from planner.cost.constant import constant_bytes, _per_gpu
    from planner.cost.memory import _PieceMemory, _profile_matrix, comm_buffers, memory_report
    from planner.cost import activations as act
    from planner.cost.time import layer_times, evaluate, time_report
    from planner.specs.layout import format_layout
    from planner.specs.params import embedding_block, head_block, layer_block, mtp_block

    model, deg, plan = setup.model, setup.deg, setup.plan
    pp, vpp = deg.pp, deg.vpp
    pat = _kinds_prefix(model)
    if pp == 1 or pat is None:
        return StageRefinement(setup, False, "single stage or interleaved layer kinds: nothing to place")
    if model.num_layers < pp * vpp:
        return StageRefinement(setup, False, "fewer layers than virtual stages")
    rc = setup.recompute
    if stage_recompute and rc.kind not in ("none", "full"):
        stage_recompute = False  # per-stage full recompute replaces, not mixes with, selective recompute
    D, k0, k1 = pat
    L = model.num_layers
    V = pp * vpp
    base_mem = memory_report(setup)
    base_time = time_report(setup).step_time_s

    # ---- memory coefficients ------------------------------------------------------------------
    sh = act.shape_of(setup)
    fp8 = setup.precision == "fp8"
    pieces = _PieceMemory(model, sh, rc, fp8, deg.tp)
    full_pieces = _PieceMemory(model, sh, dataclasses.replace(rc, kind="full", layers=None), fp8, deg.tp)
    norc = _PieceMemory(model, sh, dataclasses.replace(rc, kind="none", modules=(), layers=None), fp8, deg.tp)
    base_kind = rc.kind if rc.kind != "full" or rc.layers is None else "none"
    if stage_recompute:
        base_kind = "none"
    kinds = sorted({k0, k1})
    lay = {k: (norc if stage_recompute else pieces).layer(k, base_kind if base_kind != "selective" else "selective", k) for k in kinds}
    lay_full = {k: full_pieces.layer(k, "full", k) for k in kinds}
    nkv = model.attention.num_kv_heads

    def const_bytes(dense, expert) -> float:
        from planner.cost.constant import RankParams

        cm = constant_bytes(RankParams(dense, expert, 0.0), dp=deg.dp, cp=deg.cp, edp=deg.edp,
                            sharding=setup.sharding, moments=plan.moments, offload_optimizer=plan.offloads_optimizer)
        return cm.total

    w = {k: const_bytes(*_per_gpu(layer_block(model, k), deg.tp, nkv, deg.etp, deg.ep)) for k in kinds}
    w_emb = const_bytes(*_per_gpu(embedding_block(model), deg.tp, nkv, deg.etp, deg.ep))
    w_head = const_bytes(*_per_gpu(head_block(model), deg.tp, nkv, deg.etp, deg.ep))
    w_mtp = const_bytes(*_per_gpu(mtp_block(model), deg.tp, nkv, deg.etp, deg.ep)) * model.mtp_layers
    w_emb_copy = const_bytes(model.vocab_size * model.hidden_size / deg.tp, 0.0)
    E_piece, L_piece = pieces.embedding(), pieces.head()
    M_piece = pieces.mtp() if model.mtp_layers else None
    comm = comm_buffers(setup) + max(s.constant.fsdp_buffers for s in base_mem.stages)
    frac = base_mem.allocator_fraction
    cap = base_mem.capacity_bytes / (1 + frac)

    # ---- time coefficients ----------------------------------------------------------------------
    def unit_times(s) -> dict[str, float]:
        return {k: v["fwd_s"] + v["bwd_s"] + v["comm_exposed_s"] for k, v in layer_times(s).items()}

    plain_plan = plan.replace(recompute="none", stage_recompute=None) if stage_recompute else plan.replace(stage_recompute=None)
    t_base = unit_times(dataclasses.replace(setup, plan=plain_plan))
    t_full = unit_times(dataclasses.replace(setup, plan=plan.replace(recompute="full", stage_recompute=None)))
    ev = evaluate(setup)
    p2p = [rc_.p2p_exposed for rc_ in ev.ranks]

    # ---- the model -------------------------------------------------------------------------------
    m = cp_model.CpModel()
    # Every virtual stage holds decoder layers. With interleaving, a rank's chunks stay within one
    # layer of the average: the pipeline formula prices the bubble in average chunk times, which
    # an empty or outsized chunk would make optimistic.
    if vpp > 1:
        lo, hi = max(1, L // V - 1), -(-L // V) + 1
    else:
        lo, hi = 1, L
    n = [m.new_int_var(lo, hi, f"n{i}") for i in range(V)]
    m.add(sum(n) == L)
    b = [m.new_int_var(0, L, f"b{i}") for i in range(V + 1)]  # boundaries: chunk i holds [b_i, b_{i+1})
    m.add(b[0] == 0)
    for i in range(V):
        m.add(b[i + 1] == b[i] + n[i])
    cD = [m.new_int_var(0, D, f"cD{i}") for i in range(V + 1)]
    for i in range(V + 1):
        m.add_min_equality(cD[i], [b[i], D])
    d = [m.new_int_var(0, L, f"d{i}") for i in range(V)]  # first-kind layers of chunk i
    e = [m.new_int_var(0, L, f"e{i}") for i in range(V)]
    for i in range(V):
        m.add(d[i] == cD[i + 1] - cD[i])
        m.add(e[i] == n[i] - d[i])
    rho = [m.new_int_var(0, L if stage_recompute else 0, f"rho{r}") for r in range(pp)]
    q = [m.new_int_var(0, L, f"q{i}") for i in range(V)]  # recomputed layers of chunk i (its first q)
    qd = [m.new_int_var(0, L, f"qd{i}") for i in range(V)]
    qe = [m.new_int_var(0, L, f"qe{i}") for i in range(V)]
    for i in range(V):
        m.add_min_equality(q[i], [rho[i % pp], n[i]])
        m.add_min_equality(qd[i], [q[i], d[i]])
        m.add(qe[i] == q[i] - qd[i])

    def kib(x: float) -> int:
        return int(round(x / KIB))

    kept_i = []
    rise_f, rise_b = [], []
    big = kib(cap) * 4 + 1
    for i in range(V):
        last = i == V - 1
        extra_kept = kib(E_piece.kept) * (i == 0) + (kib(L_piece.kept) + (kib(M_piece.kept) if M_piece else 0)) * last
        k_expr = (d[i] * kib(lay[k0].kept) + e[i] * kib(lay[k1].kept)
                  - qd[i] * kib(lay[k0].kept - lay_full[k0].kept) - qe[i] * kib(lay[k1].kept - lay_full[k1].kept)
                  + extra_kept)
        kv = m.new_int_var(0, big, f"kept{i}")
        m.add(kv == k_expr)
        kept_i.append(kv)
        # Rises: the chunk's largest layer transient (upper bound of the exact run-based rise).
        has = {}
        for name, cnt in (("d", d[i]), ("e", e[i]), ("qd", qd[i]), ("qe", qe[i])):
            bl = m.new_bool_var(f"has_{name}{i}")
            m.add(cnt >= 1).only_enforce_if(bl)
            m.add(cnt == 0).only_enforce_if(bl.Not())
            has[name] = bl
        F = m.new_int_var(0, big, f"F{i}")
        B = m.new_int_var(0, big, f"B{i}")
        for name, k in (("d", k0), ("e", k1)):
            m.add(F >= kib(lay[k].fwd_transient)).only_enforce_if(has[name])
            m.add(B >= kib(lay[k].bwd_transient)).only_enforce_if(has[name])
        for name, k in (("qd", k0), ("qe", k1)):
            m.add(B >= kib(lay_full[k].bwd_transient)).only_enforce_if(has[name])
        if last:
            for piece in (L_piece, M_piece):
                if piece is not None:
                    m.add(F >= kib(piece.fwd_transient))
                    m.add(B >= kib(piece.bwd_transient))
        rf = m.new_int_var(0, 2 * big, f"rf{i}")
        m.add(rf == kv + F)
        rise_f.append(rf)
        rise_b.append(B)
    # Memory per rank, at every in-flight vector of its schedule.
    for r in range(pp):
        chunks = [r + pp * c for c in range(vpp)]
        const = sum(d[i] * kib(w[k0]) + e[i] * kib(w[k1]) for i in chunks)
        const += kib(w_emb) * (r == 0) + (kib(w_head) + kib(w_mtp)) * (r == pp - 1)
        if model.mtp_layers and r == pp - 1 and pp > 1:
            const += kib(w_emb_copy)  # the MTP rank's embedding copy
        room = kib(cap) - kib(comm)
        for kind, rises in ((0, rise_f), (1, rise_b)):
            N, chunk_of, _ = (*_profile_matrix(pp, vpp, setup.micro_batches, r, kind, setup.plan.offloads_activations), None)
            if N is None:
                continue
            for row, c in zip(N, chunk_of):
                held = sum(int(row[j]) * kept_i[chunks[j]] for j in range(vpp) if row[j])
                m.add(const + held + rises[chunks[int(c)]] <= room)
    # Time per rank and the slowest rank.
    def tu(x: float) -> int:
        return int(round(x / TIME_UNIT))

    T = m.new_int_var(0, tu(base_time) * 10 + 1, "T")
    for r in range(pp):
        chunks = [r + pp * c for c in range(vpp)]
        t = sum(d[i] * tu(t_base[k0]) + e[i] * tu(t_base[k1])
                + qd[i] * tu(t_full[k0] - t_base[k0]) + qe[i] * tu(t_full[k1] - t_base[k1]) for i in chunks)
        t += tu(t_base.get("embedding", 0.0)) * (r == 0)
        if r == pp - 1:
            t += tu(t_base.get("head", 0.0)) + tu(t_base.get("mtp", 0.0)) * model.mtp_layers
        t += tu(p2p[r])
        m.add(T >= t)
    m.minimize(T)
    # Start from the plan's own layout.
    for i, st in enumerate(setup.layout.stages):
        m.add_hint(n[i], st.num_layers)
    # Deterministic: one worker, a fixed seed and a deterministic time budget, so the same input
    # gives the same layout on any machine load.
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = time_limit_s
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return StageRefinement(setup, False, f"per-stage model {solver.status_name(status)}")
    # Among layouts with that slowest-rank time, prefer layers on later virtual stages (the early
    # ones hold the most micro-batches): one canonical answer.
    counts = [int(solver.value(x)) for x in n]
    rhos = [int(solver.value(x)) for x in rho]
    m.add(T == int(solver.value(T)))
    m.minimize(sum((V - i) * n[i] for i in range(V)) + sum(rho))
    m.clear_hints()
    for i in range(V):
        m.add_hint(n[i], counts[i])
    for r in range(pp):
        m.add_hint(rho[r], rhos[r])
    status2 = solver.solve(m)
    if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        counts = [int(solver.value(x)) for x in n]
        rhos = [int(solver.value(x)) for x in rho]
    syms = ["t" * c for c in counts]
    syms[0] = "E" + syms[0]
    syms[-1] = syms[-1] + "m" * model.mtp_layers + "L"
    changes = {"layout": format_layout(syms)}
    if stage_recompute and any(rhos):
        changes.update(recompute="full", stage_recompute="/".join(map(str, rhos)))
    elif stage_recompute:
        changes.update(stage_recompute=None, recompute="none")
    from planner.cost.setup import resolve_setup

    new = resolve_setup(model, setup.hw, setup.job, plan.replace(**changes), setup.assumptions)
    mem = memory_report(new)
    t_new = time_report(new).step_time_s
    if mem.fits and (t_new < base_time * (1 - 1e-9) or not base_mem.fits):
        return StageRefinement(new, True, f"{solver.status_name(status)}: step {base_time:.4f}s -> {t_new:.4f}s")
    why = "no faster" if mem.fits else "exact memory model rejects it"
    return StageRefinement(setup, False, f"{solver.status_name(status)}: candidate {changes['layout']} {why}")
