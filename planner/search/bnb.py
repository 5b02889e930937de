"""Best-first branch and bound over pipeline layouts: the keys whose bounds can reach the K-th
best plan are costed, the rest are proven out (planner.search.bounds says why each bound holds).

1. Every distinct (degrees, micro-batch size) is costed once at the block level (a context over
   those rows only): each block's least time and each layer's least kept memory.
2. Memory: keys whose largest chunk alone exceeds the allocation limit are dropped (with them
   every larger micro-batch size of the same degrees).
3. Every layout's keys get the step-time floor of their blocks; layouts are visited in order of
   their smallest floor.
4. A visited layout gets its time tables for the keys whose floor is within the bound U (the
   K-th best plan found so far); their exact time minima (each time term at its minimum over the
   levers) are floors too, and those keys go back into the queue under them.
5. Visited again, keys within U get two more floors, each from what is at hand: the least time
   over the lever combinations the launcher rules accept (rule tables are per signature), then,
   once U is known, over those whose constant memory and activations (the W and A tables, two of
   the seven memory terms) fit every rank. Keys still within U get memory and rule tables: their
   feasible plans lower U. (Qwen3-235B on 256 H100s: 60,071 keys costed in full under the per-term
   floor, 516 under these; most keys' fast lever choices do not fit.)
The search stops when the next floor exceeds U: no plan of those keys can be among the K best
(ties at U are visited). CP-SAT then ranks every feasible plan of the keys costed, up to U.

Until U is known, keys are costed a few at a time in small contexts of their own; then one
context holds every key whose floor is within U. All of them read the block costs of step 1.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from planner.cost.compose import CostContext, KeyTable
from planner.search.bounds import (
    block_floors, constant_floors, kept_floors, memory_floors, rank_composition, time_floors,
)
from planner.search.exhaustive import fitting_time_floor, plan_costs, rule_time_floor, space_index_vectors
from planner.search.tables import (
    MAX_TABLE_US, MEMORY_TERMS, RULE_GROUPS, TIME_TERMS, Layout, RuleTables, Tables, assemble, batch_plans, capacities, layout_of,
    memory_phase, rule_tables, time_phase, undominated_stages, build_tables,
)
from planner.specs.schedule import Schedule

INF = np.iinfo(np.int64).max
FIT_TERMS = ("W", "A")
"""The memory terms of the fitting floor (exhaustive.fitting_time_floor)."""
EARLY = -1
"""The heap bound of a memory visit asked for before U is known: before every other item."""


@dataclass
class Chunk:
    """Keys of one layout costed together in one context."""

    ctx: object
    local: np.ndarray
    """Their rows in ``ctx``."""
    rows: np.ndarray
    """Their rows in the space."""
    time: dict
    exact_floor: np.ndarray
    """Each time term at its minimum over the levers (what :meth:`BranchAndBound.timed_floors` reports)."""
    bound: np.ndarray
    """The floor the visit orders by: ``exact_floor`` until a key is first within U, then its least
    step time over the lever combinations the launcher rules accept (:meth:`BranchAndBound._memory`)."""
    done: np.ndarray
    """Which are costed in full."""
    ruled: np.ndarray
    """Which have the rules' floor in ``bound``."""
    fitted: np.ndarray
    """Which have the fitting floor (rules, constant memory and activations) in ``bound``."""
    fit_tables: dict | None = None
    """The W and A tables :meth:`BranchAndBound._fit_floor` filled for the rows it left within U
    ('at': their chunk positions, ascending), read by :meth:`BranchAndBound._part` rather than
    filled again: those rows are costed in full next (until then U does not change)."""


@dataclass
class LayoutState:
    """One pipeline layout's keys (space rows, by ascending floor) and what was computed."""

    lay: Layout
    rows: np.ndarray
    floor: np.ndarray
    """Step-time floor (us) of each row from its blocks."""
    any_floor: np.ndarray
    """The same for any layout of its degrees (the per-stage refinement's)."""
    timed: int = 0
    """rows[:timed] have time tables."""
    chunks: list = field(default_factory=list)
    parts: list = field(default_factory=list)
    """Memory, rule and time tables of the rows costed in full (see tables.assemble), with each
    row's fastest feasible plan under 'best'."""


class BranchAndBound:
    """The search's lazy tables (see the module docstring)."""

    EARLY_MEMORY = True
    """Before U is known, cost a timed chunk's first keys before timing the next layout (see _time)."""

    FIRST_TIMED = 256
    FIRST_COSTED = 64
    """Before U is known, a layout's keys get time tables this many at a time and memory tables
    this many at a time (the fastest by their floors first)."""

    def __init__(self, space, assumptions, want: int, valid, say=None, first_fit: bool = False,
                 max_step_us: int | None = None, probe=None):
        self.space, self.assumptions, self.want, self.valid = space, assumptions, want, valid
        self.first_fit = first_fit
        """Stop at the first feasible plan of a valid key (whether anything fits, not the best)."""
        self.say = say or (lambda msg: None)
        self.cap = capacities(space, assumptions)
        self.rules = RuleTables(space)
        self.plans = batch_plans(space)
        self.dominated = {"memory": 0, "step_time": 0}
        """Keys proven out: by the memory bound, by a step-time bound (never costed in full)."""
        self.U = INF if max_step_us is None else int(max_step_us)
        self.pool: list[int] = []
        """Step times (us) of the best plans of valid keys seen, at most ``want`` (a max-heap)."""
        self.layouts: list[LayoutState] = []
        self.probe = self.main = self.shared = self.first = None
        self.given_probe = probe
        """(structural keys, context) of an earlier search of the same job (the robust search's first
        search): its block costs are reused when its keys are this space's."""
        self.children = 0
        """Contexts made for keys costed before U is known (see :meth:`_child`)."""
        self.main_local: np.ndarray | None = None
        self.mem_floor = np.zeros(len(space), dtype=np.int64)
        self.visits = {"time": 0, "memory": 0}
        self.heap: list[tuple] = []
        """The visit's pending items (bound, order, kind, layout, chunk): what :meth:`run` left above U
        stays here for :meth:`extend`."""
        self.seq = itertools.count()
        self.fixed = False
        """U is a given cap that the pool no longer lowers (after :meth:`extend`)."""
        self.old_mains: list = []
        """Main contexts replaced by :meth:`extend` (their block costs stay readable)."""
        self.gi = space_index_vectors(space)[0]
        self._rows_at: tuple | None = None
        """(state stamp, gid -> place) of :meth:`_row_index`."""

    # ---- set-up ---------------------------------------------------------------------------------
    def _context(self, keys: np.ndarray, shared=None):
        """A context over some keys, reading the block costs of the probe (or composing those it
        lacks in ``shared``, when that context holds all of these keys' block keys)."""
        sp = self.space
        if self.probe is None:
            return CostContext.for_structs(sp.model, sp.hw, sp.job, self.assumptions, keys)
        ctx = CostContext(sp.model, sp.hw, sp.job, self.assumptions, KeyTable(sp.hw, sp.job, self.assumptions, keys),
                          self.probe.rates)
        if shared is not None:
            try:
                ctx.share_blocks(shared, compose_there=True)
                return ctx
            except ValueError:  # keys past the shared context's: composed here, as the first context's
                pass
        ctx.share_blocks(self.probe)
        return ctx

    def _child(self, rows: np.ndarray):
        """A context for some keys costed before U is known. The first composes the block costs
        the probe lacks over its own keys; from the second on, they are composed once in a shared
        context over the next keys of every layout and read from there: the layouts' first keys
        share most of their block keys (at 65,536 GPUs, 24 such contexts of 256 keys held 490
        distinct block keys, and each composed the same 180 block costs)."""
        self.children += 1
        if self.children == 1:
            self.first = self._context(self.space.keys[rows])
            return self.first
        if self.shared is None:
            pending = [rows] + [st.rows[st.timed:st.timed + self.FIRST_TIMED] for st in self.layouts]
            self.shared = self._context(self.space.keys[np.unique(np.concatenate(pending))])
        return self._context(self.space.keys[rows], self.shared)

    def _layout(self, pp: int, vpp: int, li: int, schedule: Schedule | None) -> Layout:
        return layout_of(self.space, pp, vpp, li, schedule)

    def setup(self) -> None:
        sp = self.space
        self.say(f"bounding {len(sp):,} structural keys")
        given = self.given_probe
        if given is not None and np.array_equal(given[0], sp.fm_keys):
            self.probe = given[1]
        else:
            self.probe = self._context(sp.fm_keys)
        kept = kept_floors(self.probe, sp)
        floors = block_floors(self.probe, sp)
        groups = [(self._layout(pp, vpp, li, sched), rows) for (pp, vpp, li, sched), rows in sp.groups()]
        constants = self._constant_floors(groups)
        for (lay, rows), constant in zip(groups, constants):
            fmi = sp.fm_of[rows]
            mem = memory_floors(self.probe, kept, sp.model, lay.layout, fmi, constant)
            self.mem_floor[rows] = mem
            keep = mem <= self.cap[0]
            self.dominated["memory"] += int((~keep).sum())
            rows, fmi = rows[keep], fmi[keep]
            if not len(rows):
                continue
            this, anyl = time_floors(self.probe, floors, lay.layout, fmi, lay.schedule)
            order = np.argsort(this, kind="stable")
            self.layouts.append(LayoutState(lay, rows[order], this[order], anyl[order]))
        if self.U < INF:  # bounded from the start (max_step_us): one context for every key within it
            self._main_context()

    def _constant_floors(self, groups: list):
        """Each (layout, rows) group's constant-memory floors in turn, (pp, rows) bytes
        (planner.search.bounds.constant_floors). Layouts whose ranks hold the same layers share
        them: computed once per composition, over the keys those layouts hold."""
        sp = self.space
        comps = [rank_composition(sp.model, lay.layout) for lay, _ in groups]
        need: dict[tuple, tuple] = {}
        for comp, (lay, rows) in zip(comps, groups):
            layout, fms = need.setdefault(comp, (lay.layout, []))
            fms.append(sp.fm_of[rows])
        tables = {}
        for comp, (layout, fms) in need.items():
            ufm = np.unique(np.concatenate(fms))
            at = np.full(len(sp.fm_keys), -1, dtype=np.int64)
            at[ufm] = np.arange(len(ufm))
            tables[comp] = (constant_floors(sp, layout, sp.fm_keys[ufm]), at)
        for comp, (_, rows) in zip(comps, groups):
            table, at = tables[comp]
            yield table[:, at[sp.fm_of[rows]]]

    # ---- the visit ------------------------------------------------------------------------------
    def run(self) -> None:
        self.setup()
        self.heap = [(int(st.floor[0]), next(self.seq), 0, g, 0) for g, st in enumerate(self.layouts)]
        heapq.heapify(self.heap)
        self._visit()

    def extend(self, cap_us: int) -> None:
        """Continue the visit up to step time ``cap_us`` (above U): every key whose floor is within
        it gets its tables, so that CP-SAT can enumerate every plan up to it; what :meth:`run`
        costed is kept (the driver's second enumeration when the first did not prove the walked
        order). U stays at ``cap_us`` from then on."""
        if cap_us <= self.U:
            return
        self.U, self.fixed = int(cap_us), True
        if self.main is not None:
            self.old_mains.append(self.main)
            self._main_context()
        self._visit()

    def _visit(self) -> None:
        heap = self.heap
        while heap:
            bound, _, kind, g, c = heap[0]
            if bound > self.U or (self.first_fit and self.U < INF):
                break  # left in the heap for extend
            heapq.heappop(heap)
            st = self.layouts[g]
            if kind == 0:
                for item in self._time(st, g):
                    heapq.heappush(heap, (item[0], next(self.seq), *item[1:]))
            else:
                nxt = self._memory(st, st.chunks[c])
                if nxt is not None:
                    heapq.heappush(heap, (nxt, next(self.seq), 1, g, c))
        costed = sum(len(p["ids"]) for p in self.parts())
        self.dominated["step_time"] = sum(len(st.rows) for st in self.layouts) - costed

    def _time(self, st: LayoutState, g: int) -> list[tuple]:
        """Time tables of the next rows within U: heap items for their memory visit and, when
        rows are left, the layout's next time visit."""
        hi = int(np.searchsorted(st.floor, self.U, side="right")) if self.U < INF else len(st.rows)
        if self.main is None:
            hi = min(hi, st.timed + self.FIRST_TIMED)
        if hi <= st.timed:
            return []
        rows = st.rows[st.timed:hi]
        st.timed = hi
        self.visits["time"] += 1
        if self.main is not None:
            ctx, local = self.main, self.main_local[rows]
        else:
            ctx, local = self._child(rows), np.arange(len(rows))
        time = time_phase(ctx, self.space, st.lay, local, self.plans)
        floor = sum(time[k].min(axis=1) for k in TIME_TERMS)
        done, ruled, fitted = (np.zeros(len(rows), dtype=bool) for _ in range(3))
        st.chunks.append(Chunk(ctx, local, rows, time, floor, floor.copy(), done, ruled, fitted))
        # Until U is known, the chunk's memory visit comes next (EARLY): the layouts' time visits would
        # otherwise all come first (their block floors sit below any key's exact floor), each in a
        # context of its own (Llama-4-Scout on 64 H100s: 4.7 GB of them before the first plan).
        out = [(EARLY if self.U == INF and self.EARLY_MEMORY else int(floor.min()), 1, g, len(st.chunks) - 1)]
        if hi < len(st.rows):
            out.append((int(st.floor[hi]), 0, g, 0))
        return out

    def _memory(self, st: LayoutState, ch: Chunk) -> int | None:
        """Memory and rule tables of the chunk's rows within U (a few while U is unknown);
        returns the chunk's next bound when rows are left, else None."""
        raw = ~ch.done & ~ch.ruled & (ch.bound <= self.U)
        if raw.any():
            # Costing a key's memory and rule tables is most of the search: first its floor is
            # raised to its fastest combination the rules accept (from the time tables at hand).
            self._rule_floor(st, ch, np.flatnonzero(raw))
        raw = ~ch.done & ~ch.fitted & (ch.bound <= self.U)
        if self.U < INF and raw.any():
            # Then to its fastest such combination whose constant memory and activations fit (two
            # of the memory tables' seven terms): on Qwen3-235B on 256 H100s most keys within U
            # fit only the slower combinations (recompute, offload, sharding).
            self._fit_floor(st, ch, np.flatnonzero(raw))
        pending = np.flatnonzero(~ch.done & (ch.bound <= self.U))
        left = ~ch.done
        if not len(pending):  # the raised floors are above U: queued under them (extend goes on)
            return int(ch.bound[left].min()) if left.any() else None
        if self.U == INF:
            pending = pending[np.argsort(ch.bound[pending], kind="stable")][:self.FIRST_COSTED]
        sel = np.sort(pending)
        ch.done[sel] = True
        self.visits["memory"] += 1
        part = self._part(st, ch, sel)
        part["best"], smallest = self._plan_times(part)
        st.parts.append(part)
        had = self.U
        self._lower_bound(part["ids"], part["best"], smallest)
        if had == INF and self.U < INF:
            self._main_context()
        # Rows above U stay queued under their floor (the visit stops there; extend goes on).
        left = ~ch.done
        return int(ch.bound[left].min()) if left.any() else None

    def _part(self, st: LayoutState, ch: Chunk, sel: np.ndarray) -> dict:
        """Memory, rule and time tables of a chunk's rows ``sel`` (see tables.assemble)."""
        part = {k: v[sel] for k, v in ch.time.items()}
        part.update(self._fitted_tables(st, ch, sel) or
                    memory_phase(ch.ctx, self.space, st.lay, ch.local[sel], self.plans))
        part["structs"] = [self.space.struct(int(i)) for i in ch.rows[sel]]
        part["R1"], part["R2"] = rule_tables(self.rules, part["structs"])
        part["ids"] = ch.rows[sel]
        part["kept"] = undominated_stages([st.lay.pp] * len(sel), *(part[k] for k in MEMORY_TERMS))
        return part

    def _fitted_tables(self, st: LayoutState, ch: Chunk, sel: np.ndarray) -> dict | None:
        """The memory tables of a chunk's rows ``sel`` with W and A read from :meth:`_fit_floor`'s
        (the activation peak is most of a memory visit's time), or None when it left some of them
        out; the chunk's copy is dropped either way (a key is costed in full once)."""
        fit, ch.fit_tables = ch.fit_tables, None
        if fit is None:
            return None
        at = np.searchsorted(fit["at"], sel)
        if not (at < len(fit["at"])).all() or not np.array_equal(fit["at"][at], sel):
            return None
        rest = tuple(k for k in MEMORY_TERMS if k not in FIT_TERMS)
        out = memory_phase(ch.ctx, self.space, st.lay, ch.local[sel], self.plans, terms=rest)
        return {k: out[k] if k in out else fit[k][at] for k in MEMORY_TERMS}

    def _rule_floor(self, st: LayoutState, ch: Chunk, sel: np.ndarray) -> None:
        """Raise the floors of a chunk's rows ``sel`` to their least step time over the lever
        combinations their launcher rules accept (exhaustive.rule_time_floor). The rules read a key's
        signature only (tables.RuleTables): within a layout, whether EP, TP, CP, expert TP and
        data parallelism exceed 1, so one key of each signature stands for the rest."""
        r1, r2 = self._rule_rows(ch.rows[sel])
        floor = rule_time_floor({k: v[sel] for k, v in ch.time.items()}, r1, r2, self.gi)
        ch.bound[sel] = np.maximum(ch.bound[sel], floor)
        ch.ruled[sel] = True

    FIT_ROWS = 1024
    """Keys whose constant-memory and activation tables :meth:`_fit_floor` holds at a time."""

    def _fit_floor(self, st: LayoutState, ch: Chunk, sel: np.ndarray) -> None:
        """Raise the floors of a chunk's rows ``sel`` to exhaustive.fitting_time_floor (their W and
        A tables are filled for it, and kept for the rows left within U: :meth:`_fitted_tables`)."""
        kept: list[tuple[np.ndarray, dict]] = []
        for a in range(0, len(sel), self.FIT_ROWS):
            part = sel[a:a + self.FIT_ROWS]
            mem = memory_phase(ch.ctx, self.space, st.lay, ch.local[part], self.plans, terms=FIT_TERMS)
            r1, r2 = self._rule_rows(ch.rows[part])
            floor = fitting_time_floor({k: v[part] for k, v in ch.time.items()}, mem["W"], mem["A"], self.cap[0],
                                       r1, r2, self.gi)
            ch.bound[part] = np.maximum(ch.bound[part], floor)
            ch.fitted[part] = True
            within = ch.bound[part] <= self.U
            kept.append((part[within], {k: v[within] for k, v in mem.items()}))
        ch.fit_tables = {"at": np.concatenate([p for p, _ in kept]),
                         **{k: np.concatenate([m[k] for _, m in kept]) for k in FIT_TERMS}}

    def _rule_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rule-table rows (R1, R2) of some keys of one layout."""
        sp = self.space
        code = sum((sp.col(k)[rows] > 1).astype(np.int64) << i for i, k in enumerate(("ep", "tp", "cp", "etp")))
        code |= ((sp.col("dp")[rows] * sp.col("cp")[rows]) > 1).astype(np.int64) << 4
        uniq, first, inv = np.unique(code, return_index=True, return_inverse=True)
        r1, r2 = rule_tables(self.rules, [sp.struct(int(rows[i])) for i in first])
        inv = np.asarray(inv).reshape(-1)
        return r1[inv], r2[inv]

    def _main_context(self) -> None:
        """One context for every key not yet timed whose floor is within U (U only decreases)."""
        spans = [st.rows[st.timed:int(np.searchsorted(st.floor, self.U, side="right"))] for st in self.layouts]
        rows = np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)
        if not len(rows):
            return
        self.main = main = self._context(self.space.keys[rows])
        if self.old_mains:
            # extend's context: its keys lie just past the replaced one's, whose block keys held
            # all of theirs on the default command (14 of 429), and whose block costs (600 of
            # them) are then read rather than composed again; those it lacks are composed here.
            try:
                main.share_blocks(self.old_mains[-1])
            except ValueError:
                pass  # block keys the replaced context lacks: the probe's, as before
        self.main_local = np.full(len(self.space), -1, dtype=np.int64)
        self.main_local[rows] = np.arange(len(rows))

    def _plan_times(self, part: dict) -> tuple[np.ndarray, np.ndarray]:
        """Each row's fastest feasible plan and its ``want`` fastest (us; INF when fewer)."""
        t = _view(self.space, part, self.cap)
        ok, times = plan_costs(t, np.arange(len(t.structs)), self.gi)
        times = np.where(ok & (times < MAX_TABLE_US), times, INF)
        k = min(self.want, times.shape[1])
        smallest = np.sort(np.partition(times, k - 1, axis=1)[:, :k], axis=1)
        return smallest[:, 0], smallest

    def _lower_bound(self, gids: np.ndarray, best: np.ndarray, smallest: np.ndarray) -> None:
        """Merge the plans of valid rows into the pool; U becomes the want-th best time."""
        for i in np.argsort(best, kind="stable"):
            if best[i] >= INF or best[i] > self.U:
                break
            if not self.valid(int(gids[i])):
                continue
            if self.fixed:
                break  # a given cap (extend): the pool no longer sets U
            for t in smallest[i]:
                if t > self.U or t >= INF:
                    break
                if len(self.pool) < self.want:
                    heapq.heappush(self.pool, -int(t))
                else:
                    heapq.heappushpop(self.pool, -int(t))
                if len(self.pool) == self.want:
                    self.U = min(self.U, -self.pool[0])

    # ---- results --------------------------------------------------------------------------------
    def contexts(self) -> list:
        """The contexts whose block costs the tables composed, the widest first (a ranked plan's
        reports read theirs: planner.cost.compose.CostContext.share_blocks_with_any)."""
        return [c for c in (self.main, *reversed(self.old_mains), self.shared, self.first) if c is not None]

    def parts(self) -> list[dict]:
        return [p for st in self.layouts for p in st.parts]

    def candidates(self) -> Tables:
        """The tables of the valid costed keys whose fastest plan is within U, in global order."""
        parts = []
        for p in self.parts():
            within = np.flatnonzero((p["best"] <= self.U) & (p["best"] < INF))
            sel = [i for i in within if self.valid(int(p["ids"][i]))]
            if sel:
                parts.append((p, np.array(sel)))
        return _gathered(self.space, parts, self.cap)

    DIAGNOSIS_KEYS = 4096
    DIAGNOSIS_LAYOUTS = 16
    """When nothing fits, the keys the memory bound left out are costed for the diagnosis, best
    first by their floors, while they hold at most this many keys and pipeline layouts (a
    layout's tables cost the same for one key or a thousand of it)."""

    def all_costed(self) -> Tables:
        """Every costed key's tables and, when no plan fits, those of the keys the memory bound
        left out whose floor is below the smallest peak found (see DIAGNOSIS_KEYS):
        :attr:`exact_peak` says whether that smallest peak is the whole space's."""
        parts = self.parts()
        self.exact_peak = True
        if self.U < INF:
            return _gathered(self.space, [(p, np.arange(len(p["ids"]))) for p in parts], self.cap)
        from planner.search.diagnose import smallest_peak  # noqa: PLC0415  # cycle: diagnose imports BranchAndBound from here
        sp = self.space
        t = assemble(sp, parts, self.cap)
        best = smallest_peak(t, range(len(t.structs)))[0] if parts else np.inf
        costed = {int(g) for p in parts for g in p["ids"]}
        order = [int(i) for i in np.argsort(self.mem_floor, kind="stable") if int(i) not in costed]
        extra: list[Tables] = []
        layouts: set[tuple[int, int, int, int]] = set()
        i = 0
        pp, vpp, lo, sc = sp.col("pp"), sp.col("vpp"), sp.layout_of, sp.schedule_col()
        while i < len(order) and self.mem_floor[order[i]] < best:
            chunk: list[int] = []
            while i < len(order) and len(chunk) < 64 and self.mem_floor[order[i]] < best:
                g = order[i]
                lay = (int(pp[g]), int(vpp[g]), int(lo[g]), int(sc[g]))
                if lay not in layouts and len(layouts) >= self.DIAGNOSIS_LAYOUTS or i >= self.DIAGNOSIS_KEYS:
                    break
                layouts.add(lay)
                chunk.append(g)
                i += 1
            if not chunk:
                self.exact_peak = False
                break
            rows = np.sort(np.array(chunk))
            part = build_tables(sp, assumptions=self.assumptions, ids=rows, rules=self.rules,
                                structs=[sp.struct(int(g)) for g in rows])
            extra.append(part)
            best = min(best, smallest_peak(part, range(len(rows)))[0])
        tables = [t] + extra
        return _ordered(_concat(self.space, tables, self.cap))

    def best_of(self) -> dict[int, int]:
        """Fastest feasible plan (us) of every costed key (INF when none fits)."""
        return {int(g): int(b) for p in self.parts() for g, b in zip(p["ids"], p["best"])}

    def timed_floors(self) -> list[tuple[int, int]]:
        """(exact time floor us, global id) of every key with time tables, ascending."""
        out = []
        for st in self.layouts:
            for ch in st.chunks:
                out += [(int(f), int(r)) for f, r in zip(ch.exact_floor, ch.rows)]
        return sorted(out)

    def row_tables(self, gid: int) -> Tables | None:
        """The full tables of one costed key, or None. A key whose floor (each time term at its
        minimum) was within U but whose rules' floor was not is costed here, on demand: it was
        costed in full before the rules' floor (the per-stage refinement's rescue seeds ask for it)."""
        where = self._row_index().get(int(gid))
        if where is None:
            return None
        kind, a, b, i = where
        if kind == "part":
            return _view(self.space, _part_subset(a, np.array([i])), self.cap)
        return _view(self.space, self._part(a, b, np.array([i])), self.cap)

    def _row_index(self) -> dict[int, tuple]:
        """gid -> where :meth:`row_tables` finds its tables: ("part", part, None, row) for a key costed
        in full (the first part holding it), ("chunk", layout state, chunk, row) for one it costs on
        demand. Built once per state of the visit (the per-stage refinement asks for tens of thousands
        of keys: scanning every part for each took minutes on Llama 4 Scout on 256 GB200s)."""
        parts = self.parts()
        stamp = (len(parts), sum(len(st.chunks) for st in self.layouts), self.U, self.visits["time"], self.visits["memory"])
        if self._rows_at is not None and self._rows_at[0] == stamp:
            return self._rows_at[1]
        index: dict[int, tuple] = {}
        for p in parts:
            for i, g in enumerate(p["ids"].tolist()):
                index.setdefault(g, ("part", p, None, i))
        for st in self.layouts:
            for ch in st.chunks:
                ok = np.flatnonzero(ch.ruled & ~ch.done & (ch.exact_floor <= self.U))
                for i, g in zip(ok.tolist(), ch.rows[ok].tolist()):
                    index.setdefault(g, ("chunk", st, ch, i))
        self._rows_at = (stamp, index)
        return index


def _view(space, part: dict, cap) -> Tables:
    """One part's tables as they are (one layout: no padding, no copy; tables.assemble copies)."""
    p = part
    return Tables(space, p["structs"], p["W"], p["C"], p["G"], p["A"], p["HW"], p["HA"], p["OT"], p["TP"], p["TD"],
                  p["TO"], p["R1"], p["R2"], cap[0], cap[1], p["kept"], p["ids"])


def _concat(space, tables: list[Tables], cap) -> Tables:
    parts = []
    for t in tables:
        if len(t.structs):
            p = {k: getattr(t, k) for k in (*MEMORY_TERMS, *TIME_TERMS, "R1", "R2")}
            p.update(structs=t.structs, ids=t.ids, kept=t.stages_kept)
            parts.append(p)
    return assemble(space, parts, cap)


def _gathered(space, parts: list[tuple[dict, np.ndarray]], cap) -> Tables:
    """``_ordered(assemble(...))`` of the rows ``sel`` of each part, written once into the padded
    arrays at their place in global order: no intermediate copies (the parts of Qwen3-235B on 256
    H100s are GBs, and assemble's concatenation and the reordering held three copies at once)."""
    if not parts:
        return assemble(space, [], cap)
    ids = np.concatenate([p["ids"][sel] for p, sel in parts])
    order = np.argsort(ids, kind="stable")
    at = np.empty(len(ids), dtype=np.int64)
    at[order] = np.arange(len(ids))
    structs = [s for p, sel in parts for s in (p["structs"][i] for i in sel)]
    kept = [k for p, sel in parts for k in (p["kept"][i] for i in sel)]
    maxR = max(s.pp for s in structs)
    T: dict[str, np.ndarray] = {}
    for k in (*MEMORY_TERMS, *TIME_TERMS, *RULE_GROUPS):
        first = parts[0][0][k]
        shape = (len(ids), maxR, first.shape[2]) if k in MEMORY_TERMS else (len(ids), first.shape[1])
        out = np.zeros(shape, dtype=first.dtype)
        a = 0
        for p, sel in parts:
            dst = at[a:a + len(sel)]
            if k in MEMORY_TERMS:
                out[dst, :p[k].shape[1]] = p[k][sel]
            else:
                out[dst] = p[k][sel]
            a += len(sel)
        T[k] = out
    return Tables(space, [structs[i] for i in order], T["W"], T["C"], T["G"], T["A"], T["HW"], T["HA"], T["OT"],
                  T["TP"], T["TD"], T["TO"], T["R1"], T["R2"], cap[0], cap[1], [kept[i] for i in order], ids[order])


def _ordered(t: Tables) -> Tables:
    assert t.ids is not None  # set in Tables.__post_init__
    return t.subset(np.argsort(t.ids, kind="stable"))


def _part_subset(part: dict, sel: np.ndarray) -> dict:
    out = {k: (v[sel] if isinstance(v, np.ndarray) else v) for k, v in part.items()}
    out["structs"] = [part["structs"][i] for i in sel]
    out["kept"] = [part["kept"][i] for i in sel]
    return out
