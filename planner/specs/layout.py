"""Pipeline layouts: which decoder layers, embedding, MTP and loss each virtual stage holds.

The string form is Megatron-Core's ``--pipeline-model-parallel-layout`` (megatron/core/transformer/
pipeline_parallel_layer_layout.py): ``E`` embedding, ``t`` decoder layer, ``m`` MTP module, ``L``
loss/output head, ``|`` separates virtual stages, ``(..)*n`` and ``x*n`` repeat, commas are
cosmetic. Which rank holds a stage is the schedule's placement (planner.cost.schedules.ops):

- ``loop`` (Megatron, torch's looped schedules): virtual stage i on rank i % pp as its chunk i // pp;
- ``v`` (ZB-V, DualPipeV; torchtitan's "v" style): 2 pp stages, stage i < pp on rank i as chunk 0,
  stage i >= pp on rank 2 pp - 1 - i as chunk 1;
- ``dual`` (DualPipe): pp stages, each on two ranks: rank r holds stage r as chunk 0 and stage
  pp - 1 - r as chunk 1 (deepseek-ai/DualPipe keeps two copies of the parameters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Protocol

from planner.errors import PlannerError, PlanRuleError, excerpt
from planner.specs.schedule import Schedule

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec

_SYMBOLS = set("Etm L".replace(" ", ""))


MAX_LAYOUT_SYMBOLS = 2**16
"""Most symbols a layout may expand to (65,536: far above any layout of a model planner accepts,
at most 256 layers, MTP modules and stage separators included; expanding this many is instant)."""
MAX_LAYOUT_NESTING = 8
"""Deepest nesting of '(..)*n' groups (real layouts nest one level)."""
_MAX_REPEAT_DIGITS = 6


def _layout_error(text: str, problem: str) -> PlannerError:
    return PlannerError(
        f"Pipeline layout '{excerpt(text)}' {problem}.",
        hint="Use E (embedding), t (decoder layer), m (MTP), L (loss), '|' between stages, "
        "and (..)*n or t*n for repeats, as Megatron's --pipeline-model-parallel-layout does.",
    )


def expand_layout(text: str) -> str:
    """Unroll repeats: '(tt|)*2t*3' -> 'tt|tt|ttt'. Nesting, repeat counts and the expanded
    length are bounded (MAX_LAYOUT_NESTING, MAX_LAYOUT_SYMBOLS), each checked before anything is
    repeated, so no layout string can make this slow; characters that are no layout symbol pass
    through for :func:`parse_layout` to name."""
    s = text.replace(",", "").replace(" ", "")
    if len(s) > MAX_LAYOUT_SYMBOLS:
        raise _layout_error(text, f"is {len(s):,} characters long (at most {MAX_LAYOUT_SYMBOLS:,})")
    out, i = _expand_seq(text, s, 0, 0)
    if i < len(s):  # a ')' with no '(' before it
        raise _layout_error(text, f"has a ')' at position {i + 1} that closes no '('")
    return out


def _repeat_count(text: str, s: str, i: int) -> tuple[int | None, int]:
    """The n of a '*n' at position i (None when there is no '*')."""
    if i >= len(s) or s[i] != "*":
        return None, i
    j = i + 1
    while j < len(s) and s[j] in "0123456789":
        j += 1
    if j == i + 1:
        raise _layout_error(text, f"has a '*' at position {i + 1} without a repeat count after it")
    if j - i - 1 > _MAX_REPEAT_DIGITS:
        raise _layout_error(text, f"repeats something {s[i + 1:j][:20]} times, beyond any layout")
    return int(s[i + 1:j]), j


_PLAIN = re.compile(r"[^()*]+")


def _expand_seq(text: str, s: str, i: int, depth: int) -> tuple[str, int]:
    parts: list[str] = []
    total = 0

    def add(piece: str) -> None:
        nonlocal total
        total += len(piece)
        if total > MAX_LAYOUT_SYMBOLS:
            raise _layout_error(text, f"expands to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
        parts.append(piece)

    while i < len(s):
        c = s[i]
        if c == ")":
            break
        if c == "(":
            if depth >= MAX_LAYOUT_NESTING:
                raise _layout_error(text, f"nests '(..)' groups more than {MAX_LAYOUT_NESTING} deep")
            inner, j = _expand_seq(text, s, i + 1, depth + 1)
            if j >= len(s):
                raise _layout_error(text, f"has a '(' at position {i + 1} that is never closed")
            n, nxt = _repeat_count(text, s, j + 1)
            if n is None:
                raise _layout_error(text, f"has a '(..)' group at position {i + 1} without '*n' after it")
            i = nxt
            if total + len(inner) * n > MAX_LAYOUT_SYMBOLS:  # checked before repeating
                raise _layout_error(text, f"expands to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
            add(inner * n)
        elif c == "*":  # a '*' after no repeatable symbol: left for parse_layout to name
            add(c)
            i += 1
        else:  # a run of plain symbols; its last one may carry '*n'
            plain = _PLAIN.match(s, i)
            assert plain is not None  # s[i] is not one of "()*" here
            end = plain.end()
            if end < len(s) and s[end] == "*" and s[end - 1] in "EtmL":
                n, nxt = _repeat_count(text, s, end)
                assert n is not None  # s[end] is a '*'
                if total + (end - 1 - i) + n > MAX_LAYOUT_SYMBOLS:
                    raise _layout_error(text, f"expands to more than {MAX_LAYOUT_SYMBOLS:,} symbols")
                add(s[i:end - 1] + s[end - 1] * n)
                i = nxt
            else:
                add(s[i:end])
                i = end
    return "".join(parts), i


@lru_cache(maxsize=4096)
def parse_layout(text: str) -> tuple[str, ...]:
    """The virtual stages of a layout string, each as a string of symbols."""
    flat = expand_layout(text)
    bad = sorted(set(flat) - _SYMBOLS - {"|"})
    if bad:
        raise _layout_error(text, f"has an unknown symbol {bad[0]!r}" if not bad[0].isprintable()
                            else f"has an unknown symbol '{bad[0]}'")
    return tuple(flat.split("|"))


@dataclass(frozen=True)
class VirtualStage:
    """One model chunk on one pipeline rank."""

    index: int
    """Position in the layout (0-based)."""
    pp_rank: int
    vpp_rank: int
    layers: tuple[int, ...]
    """Global indices of the decoder layers it holds."""
    embedding: bool
    loss: bool
    mtp: int
    """MTP modules it holds."""

    @property
    def num_layers(self) -> int:
        return len(self.layers)


def placement_of(schedule: Schedule | None) -> str:
    """Where the stages of ``schedule`` sit (its record's placement; 'loop' without one)."""
    return "loop" if schedule is None else schedule.placement


@dataclass(frozen=True)
class PipelineLayout:
    pp: int
    vpp: int
    stages: tuple[VirtualStage, ...]
    placement: str = "loop"
    """Which rank holds each stage (see the module docstring)."""

    def rank_stages(self, rank: int) -> tuple[VirtualStage, ...]:
        """The chunks of pipeline rank ``rank`` in chunk order (DualPipe: stage r, then stage
        pp - 1 - r)."""
        return self._by_rank[rank]

    @cached_property
    def _by_rank(self) -> tuple[tuple[VirtualStage, ...], ...]:
        if self.placement == "dual":
            return tuple((self.stages[r], self.stages[self.pp - 1 - r]) for r in range(self.pp))
        return tuple(tuple(sorted((s for s in self.stages if s.pp_rank == r), key=lambda s: s.vpp_rank))
                     for r in range(self.pp))

    @property
    def chunks_per_rank(self) -> int:
        return 2 if self.placement == "dual" else self.vpp

    def passes(self, micro_batches):
        """Micro-batches each chunk of a rank runs per step: all of them, or with DualPipe's two
        directions half (each rank's chunk r carries one direction's)."""
        return micro_batches // 2 if self.placement == "dual" else micro_batches

    def to_string(self) -> str:
        return format_layout(self.symbols())

    def symbols(self) -> tuple[str, ...]:
        return tuple(
            ("E" if s.embedding else "") + "t" * s.num_layers + "m" * s.mtp + ("L" if s.loss else "")
            for s in self.stages
        )

    def layers_per_rank(self) -> list[int]:
        return [sum(s.num_layers for s in self.rank_stages(r)) for r in range(self.pp)]


def format_layout(stages: tuple[str, ...] | list[str]) -> str:
    """Compact string: runs of identical stages become '(..|)*n', runs of 't' become 't*n' only when
    long. Round-trips through :func:`parse_layout`."""
    out: list[str] = []
    i, n = 0, len(stages)
    while i < n:
        j = i
        while j + 1 < n and stages[j + 1] == stages[i]:
            j += 1
        run = j - i + 1
        last = j == n - 1
        if run >= 3 and not last:
            out.append(f"({stages[i]}|)*{run}")
        elif run >= 3 and last:
            out.append(f"({stages[i]}|)*{run - 1}{stages[i]}")
        else:
            out.append("|".join(stages[i : j + 1]) + ("" if last else "|"))
        i = j + 1
    return "".join(out)


def _rule(rule: str, msg: str, hint: str | None = None) -> PlanRuleError:
    return PlanRuleError(rule, msg, hint=hint)


def even_layout_symbols(model: ModelSpec, pp: int, vpp: int) -> tuple[str, ...]:
    """Megatron's default split (no layout, no first/last): layers evenly over pp*vpp chunks, the
    embedding on the first chunk, MTP and the loss on the last."""
    chunks = pp * vpp
    L = model.num_layers
    if L % chunks:
        raise _rule(
            "layers-divisible",
            f"{model.name} has {L} decoder layers, which do not split evenly over pp*vpp = {pp}*{vpp} = "
            f"{chunks} stages (Megatron validate_args).",
            hint="Give an uneven layout, e.g. layout=" + suggest_layout(model, pp, vpp)
            + ", or choose pp/vpp that divide the layer count.",
        )
    per = L // chunks
    syms = ["t" * per for _ in range(chunks)]
    syms[0] = "E" + syms[0]
    syms[-1] = syms[-1] + "m" * model.mtp_layers + "L"
    return tuple(syms)


def suggest_layout(model: ModelSpec, pp: int, vpp: int) -> str:
    """An uneven layout that balances layers, lighter on the first (embedding) and last (loss,
    MTP) chunks, as the Megatron-Core DeepSeek-V3 recipes do. With more chunks than decoder layers
    (at most L + 2) the embedding and the loss take chunks of their own, as in the Megatron-Bridge
    Llama 3.1 405B recipe's ``E|(t|)*126L``."""
    chunks = pp * vpp
    L = model.num_layers
    tail = "m" * model.mtp_layers + "L"
    if chunks == L + 2:  # one decoder layer per chunk, the embedding and the loss on their own
        return format_layout(["E"] + ["t"] * L + [tail])
    if chunks == L + 1:  # the loss (output projection, MTP) is the heavier end: it gets its own chunk
        return format_layout(["Et"] + ["t"] * (L - 1) + [tail])
    if chunks > L + 2:
        raise _rule("layers-per-chunk", f"{chunks} virtual stages for {L} decoder layers, the embedding and the "
                    "loss: some stage would be empty.")
    base, extra = divmod(L, chunks)
    counts = [base] * chunks
    # Give the remainder to middle chunks first, the end chunks carry embedding/loss work.
    order = list(range(1, chunks - 1)) + [0, chunks - 1] if chunks > 2 else list(range(chunks))
    for k in range(extra):
        counts[order[k % len(order)]] += 1
    syms = ["t" * c for c in counts]
    syms[0] = "E" + syms[0]
    syms[-1] = syms[-1] + "m" * model.mtp_layers + "L"
    return format_layout(syms)


class LayerCountsOf(Protocol):
    """What an uneven split reads of a model: a ModelSpec, or the counts a launch's flags give."""

    @property
    def num_layers(self) -> int: ...
    @property
    def mtp_layers(self) -> int: ...
    @property
    def name(self) -> str: ...


def uneven_layout_symbols(model: LayerCountsOf, pp: int, vpp: int, first: int | None, last: int | None) -> tuple[str, ...]:
    """Megatron's --decoder-first/last-pipeline-num-layers: first and last pipeline ranks get the
    given counts, split evenly over their vpp chunks; the middle ranks share the rest."""
    L = model.num_layers
    f = first if first is not None else None
    la = last if last is not None else None
    given = (f is not None) + (la is not None)
    middle_ranks = pp - given
    middle_layers = L - (f or 0) - (la or 0)
    if middle_ranks == 0 and middle_layers:
        raise _rule("uneven-pp", f"{middle_layers} middle layers but no middle pipeline stages.")
    if middle_ranks and (middle_layers <= 0 or middle_layers % middle_ranks):
        raise _rule(
            "uneven-pp",
            f"{middle_layers} middle layers do not divide over {middle_ranks} middle pipeline stages "
            "(TransformerConfig uneven-PP rule).",
        )
    per_rank = [middle_layers // middle_ranks if middle_ranks else 0] * pp
    if f is not None:
        per_rank[0] = f
    if la is not None:
        per_rank[-1] = la
    for r, n in enumerate(per_rank):
        if n % vpp:
            raise _rule(
                "uneven-pp-vpp",
                f"Pipeline rank {r} would hold {n} layers, not divisible by vpp={vpp} (TransformerConfig).",
            )
    syms = []
    for _ in range(vpp):
        for r in range(pp):
            syms.append("t" * (per_rank[r] // vpp))
    syms[0] = "E" + syms[0]
    syms[-1] = syms[-1] + "m" * model.mtp_layers + "L"
    return tuple(syms)


def _rank_and_chunk(i: int, pp: int, placement: str) -> tuple[int, int]:
    """(rank, chunk) of layout stage ``i``: see the module docstring (DualPipe's second holder,
    rank pp - 1 - i, is PipelineLayout.rank_stages's)."""
    if placement == "v":
        return (i, 0) if i < pp else (2 * pp - 1 - i, 1)
    if placement == "dual":
        return i, 0
    return i % pp, i // pp


_BUILT: dict[tuple, tuple[object, PipelineLayout]] = {}
"""Layouts built, by (model identity, pp, vpp, layout, placement): the launcher rules of a search
resolve the same few layouts for every lever combination they check. The model object is kept
with each entry, so an identity is never reused while its entry lives."""


def build_layout(model: ModelSpec, pp: int, vpp: int, layout: str | None,
                 schedule: Schedule | None = None) -> PipelineLayout:
    """Resolve the plan's layout (or the even default) into virtual stages, checking it against
    the model the way Megatron's PipelineParallelLayerLayout.validate_layer_layout does; the
    schedule's placement says which rank holds each stage."""
    key = (id(model), pp, vpp, layout, placement_of(schedule))
    hit = _BUILT.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    built = _build_layout(model, pp, vpp, layout, schedule)
    if len(_BUILT) > 4096:
        _BUILT.clear()
    _BUILT[key] = (model, built)
    return built


def _build_layout(model: ModelSpec, pp: int, vpp: int, layout: str | None, schedule: Schedule | None) -> PipelineLayout:
    placement = placement_of(schedule)
    syms = parse_layout(layout) if layout else even_layout_symbols(model, pp, vpp)
    empty = [i for i, st in enumerate(syms) if not st]
    if empty:
        raise _rule(
            "layout-empty-stage",
            f"Virtual stage {empty[0]} of the layout is empty ('|' twice in a row, or at the start or end): every "
            "stage must hold at least one of E, t, m or L.",
            hint="Remove the extra '|', or give the stage a layer.",
        )
    if len(syms) % pp:
        raise _rule("layout-stages", f"Layout has {len(syms)} stages, not a multiple of pp={pp}.")
    if layout and len(syms) // pp != vpp:
        raise _rule(
            "layout-vpp",
            f"Layout has {len(syms)} stages, which with pp={pp} means vpp={len(syms) // pp}, but the plan "
            f"says vpp={vpp}.",
            hint=f"Set vpp={len(syms) // pp} or change the layout.",
        )
    flat = "".join(syms)
    counts = {c: flat.count(c) for c in "EtmL"}
    if not flat.startswith("E") or counts["E"] != 1:
        raise _rule("layout-embedding", "The layout must start with E (the embedding) and name it once.")
    if not flat.endswith("L") or counts["L"] != 1:
        raise _rule("layout-loss", "The layout must end with L (the loss) and name it once.")
    if counts["t"] != model.num_layers:
        raise _rule(
            "layout-layers",
            f"Layout holds {counts['t']} decoder layers; {model.name} has {model.num_layers}.",
        )
    if counts["m"] != model.mtp_layers:
        raise _rule(
            "layout-mtp",
            f"Layout holds {counts['m']} MTP modules; {model.name} has {model.mtp_layers}.",
        )
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise _rule("layout-mtp", "Decoder layers must come before MTP modules in the layout.")
    stages = []
    next_layer = 0
    for i, s in enumerate(syms):
        n = s.count("t")
        rank, chunk = _rank_and_chunk(i, pp, placement)
        stages.append(
            VirtualStage(
                index=i, pp_rank=rank, vpp_rank=chunk,
                layers=tuple(range(next_layer, next_layer + n)),
                embedding="E" in s, loss="L" in s, mtp=s.count("m"),
            )
        )
        next_layer += n
    for st in stages:
        if st.mtp and placement == "loop" and st.vpp_rank != vpp - 1:
            raise _rule("layout-mtp", "Megatron keeps MTP modules in the last virtual stage of a rank.")
    return PipelineLayout(pp, vpp, tuple(stages), placement)
