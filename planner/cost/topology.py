"""Where each process group's traffic runs: GPUs in NVLink domains, NICs, and rank placement.

Ranks are laid out in Megatron's order (``--order``, default tp-cp-ep-dp-pp, fastest-varying
first; megatron/core/parallel_state.py ``RankGenerator``): the attention grid uses tp, cp, dp, pp
and the expert grid (parallel folding) etp, ep, edp, pp over the same ranks. Rank r runs on GPU
slot r of the job, and ``domain_fill`` consecutive slots share one NVLink domain (8 on HGX, 72 on
NVL72; fewer with ``--domain-fill``, leaving the rest of each domain idle).

A group inside one domain talks over NVLink; a group spanning k domains with g members in each runs
hierarchically: NVLink inside each domain and the members' NICs (rail-optimized fat tree, one NIC
per GPU) across domains. :func:`group_spans` gives each dimension's worst group as a
:class:`GroupSpan`; :func:`build_topology` builds the same placement as a networkx graph (GPUs,
NVSwitch domains, one NIC per GPU, the fabric) for reports and checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.errors import PlannerError


@dataclass(frozen=True)
class GroupSpan:
    """How the groups of one parallel dimension sit on NVLink domains (worst group)."""

    dim: str
    size: int
    domains: int
    """Domains the worst group spans."""
    per_domain: int
    """Fewest members the worst group has in one of its domains (its NIC-bound share)."""
    groups: int
    crossing: int
    """Groups that span more than one domain."""
    members: tuple[int, ...] = ()
    """Ranks of the worst group (for explain)."""

    @property
    def cross_domain(self) -> bool:
        return self.domains > 1


@lru_cache(maxsize=256)
def grid_orders(order: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(attention grid, expert grid) dimension orders from a Megatron order string."""
    dims = tuple(order.split("-"))
    dense = tuple(d for d in dims if d != "ep")
    expert = tuple({"tp": "etp", "dp": "edp"}.get(d, d) for d in dims if d != "cp")
    return dense, expert


def group_ranks(sizes: dict[str, int], order: tuple[str, ...], dim: str) -> np.ndarray:
    """Ranks of every group of ``dim`` (rows), for a grid whose dims vary fastest-first in
    ``order``: rank = sum(coord_i * prod(size_j for j before i))."""
    shape = tuple(sizes[d] for d in reversed(order))
    grid = np.arange(math.prod(shape)).reshape(shape)
    axis = len(order) - 1 - order.index(dim)
    return np.moveaxis(grid, axis, -1).reshape(-1, sizes[dim])


def default_domain_fill(domain_size: int, tp: int, cp: int, ep: int, etp: int) -> int:
    """The largest GPU count per domain, at most the domain size, that keeps the NVLink-bound
    groups whole: TP (and TP x CP) and the expert block ETP x EP when they fit in a domain, e.g. 64
    of 72 on NVL72 for EP64, 72 for EP8 or dense plans."""
    blocks = [tp]
    if tp * cp <= domain_size:
        blocks.append(tp * cp)
    if etp * ep <= domain_size:
        blocks.append(etp * ep)
    block = math.lcm(*blocks)
    if block > domain_size:
        return domain_size
    return (domain_size // block) * block


def resolve_domain_fill(domain_size: int, requested: int | None, tp: int, cp: int, ep: int, etp: int) -> int:
    if requested is None:
        return default_domain_fill(domain_size, tp, cp, ep, etp)
    if not 1 <= requested <= domain_size:
        raise PlannerError(
            f"--domain-fill {requested} must be between 1 and the NVLink domain size ({domain_size})."
        )
    return requested


def idle_gpus(gpus: int, fill: int, domain_size: int) -> int:
    """GPUs left idle in the domains the job occupies."""
    return -(-gpus // fill) * domain_size - gpus


def group_stride(sizes: dict[str, int], order: tuple[str, ...], dim: str) -> tuple[int, int, int]:
    """(stride, size, total ranks) of ``dim``'s groups: a group is ``size`` ranks ``stride`` apart
    (the product of the faster-varying sizes); its first ranks, ascending, are the rows of
    :func:`group_ranks`."""
    stride = math.prod(sizes[d] for d in order[: order.index(dim)])
    return stride, sizes[dim], math.prod(sizes[d] for d in order)


def progression_ranks(stride: int, size: int, total: int) -> np.ndarray:
    """Ranks of every group of a dimension with this stride, size and total (same rows, same
    order as :func:`group_ranks`)."""
    block = stride * size
    first = (np.arange(total // block)[:, None] * block + np.arange(stride)[None, :]).reshape(-1)
    return first[:, None] + stride * np.arange(size)[None, :]


def _span(name: str, ranks: np.ndarray, fill: int, rows_sorted: bool = False) -> GroupSpan:
    """The worst group of these (one row per group): the most domains, and its fewest members in
    one domain. ``rows_sorted``: each row's ranks ascend already."""
    doms = ranks // fill
    n_groups, size = ranks.shape
    # Members per domain for every group: sort domains in each row and count runs.
    srt = doms if rows_sorted else np.sort(doms, axis=1)
    new = np.ones_like(srt, dtype=bool)
    new[:, 1:] = srt[:, 1:] != srt[:, :-1]
    k = new.sum(axis=1)
    worst = int(np.argmax(k))
    row = srt[worst]
    _, counts = np.unique(row, return_counts=True)
    return GroupSpan(name, size, int(k[worst]), int(counts.min()), n_groups, int((k > 1).sum()),
                     tuple(ranks[worst].tolist()))


def _named(span: GroupSpan, dim: str) -> GroupSpan:
    return GroupSpan(dim, span.size, span.domains, span.per_domain, span.groups, span.crossing, span.members)


@lru_cache(maxsize=4096)
def _progression_span(stride: int, size: int, total: int, fill: int) -> GroupSpan:
    """Span of one dimension's groups; depends only on where its ranks fall (memoized on that
    small key: many plans share a dimension's stride and size)."""
    return _span("", progression_ranks(stride, size, total), fill, rows_sorted=True)


@lru_cache(maxsize=8192)
def _progression_named(stride: int, size: int, total: int, fill: int, dim: str) -> GroupSpan:
    return _named(_progression_span(stride, size, total, fill), dim)


@lru_cache(maxsize=4096)
def group_spans(order: str, fill: int, tp: int, cp: int, dp: int, pp: int, etp: int, ep: int, edp: int) -> dict[str, GroupSpan]:
    """Span of every parallel dimension's groups: tp, cp, dp (and 'dpcp', the gradient group of
    dense parameters), pp; etp, ep, edp for the expert grid."""
    dense_order, expert_order = grid_orders(order)
    dense = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    expert = {"etp": etp, "ep": ep, "edp": edp, "pp": pp}
    out: dict[str, GroupSpan] = {}
    for sizes, grid_order in ((dense, dense_order), (expert, expert_order)):
        total = tp * cp * dp * pp if sizes is dense else etp * ep * edp * pp
        stride = 1  # group_stride's product of the faster-varying sizes, accumulated in order
        for d in grid_order:
            if sizes is dense or d != "pp":  # pp is one grid's dimension (the dense grid's)
                out[d] = _progression_named(stride, sizes[d], total, fill, d)
            stride *= sizes[d]
        if sizes is dense:
            # Gradient group of dense parameters: DP x CP (Megatron's data-parallel-with-CP group).
            out["dpcp"] = _merged_span(dense_order, fill, tp, cp, dp, pp) if cp > 1 else _named(out["dp"], "dpcp")
    return out


@lru_cache(maxsize=4096)
def _merged_span(dense_order: tuple[str, ...], fill: int, tp: int, cp: int, dp: int, pp: int) -> GroupSpan:
    return _span("dpcp", _merged_group({"tp": tp, "cp": cp, "dp": dp, "pp": pp}, dense_order, ("cp", "dp")), fill)


def _merged_group(sizes: dict[str, int], order: tuple[str, ...], dims: tuple[str, ...]) -> np.ndarray:
    shape = tuple(sizes[d] for d in reversed(order))
    grid = np.arange(math.prod(shape)).reshape(shape)
    axes = [len(order) - 1 - order.index(d) for d in dims]
    moved = np.moveaxis(grid, axes, list(range(-len(axes), 0)))
    return moved.reshape(-1, math.prod(sizes[d] for d in dims))


# ---------------------------------------------------------------------------------------------
# The networkx view: for explain and for checking the analytic spans.
# ---------------------------------------------------------------------------------------------
def build_topology(gpus: int, fill: int, domain_size: int, nvlink_bw: float, nic_bw: float):
    """A networkx graph of the job: node ('gpu', r) for each rank, ('nvswitch', d) for each
    domain, ('nic', r) for each GPU's NIC and ('fabric',) for the scale-out network. Edges carry
    ``bandwidth`` (bytes/s per direction) and ``kind`` ('nvlink', 'pcie-nic', 'network')."""
    import networkx as nx  # noqa: PLC0415  # start-up: networkx (~0.13 s) only for this graph view

    g = nx.Graph()
    domains = -(-gpus // fill)
    g.add_node(("fabric",), kind="fabric")
    for d in range(domains):
        g.add_node(("nvswitch", d), kind="nvswitch", slots=domain_size, used=min(fill, gpus - d * fill))
    for r in range(gpus):
        d = r // fill
        g.add_node(("gpu", r), kind="gpu", domain=d)
        g.add_node(("nic", r), kind="nic")
        g.add_edge(("gpu", r), ("nvswitch", d), bandwidth=nvlink_bw, kind="nvlink")
        g.add_edge(("gpu", r), ("nic", r), bandwidth=nic_bw, kind="pcie-nic")
        g.add_edge(("nic", r), ("fabric",), bandwidth=nic_bw, kind="network")
    return g


def group_links(graph, ranks) -> dict:
    """Members and links a group's collective uses, read off the graph: NVLink edges of members
    sharing a domain, NIC and network edges when the group spans domains; and the bottleneck
    per-GPU bandwidth along any member-to-member route."""
    import networkx as nx  # noqa: PLC0415  # start-up: networkx (~0.13 s) only for this graph view

    ranks = [int(r) for r in ranks]
    domains = sorted({graph.nodes[("gpu", r)]["domain"] for r in ranks})
    links = set()
    bottleneck = math.inf
    if len(ranks) > 1:
        sub = graph.copy()
        if len(domains) == 1:
            # Inside one domain NCCL stays on NVLink.
            sub.remove_node(("fabric",))
        for a, b in zip(ranks, ranks[1:] + ranks[:1]):
            path = nx.shortest_path(sub, ("gpu", a), ("gpu", b))
            for u, v in zip(path, path[1:]):
                e = sub.edges[u, v]
                links.add((u, v, e["kind"]))
                bottleneck = min(bottleneck, e["bandwidth"])
    return {
        "members": ranks,
        "domains": domains,
        "links": sorted({(str(u), str(v), k) for u, v, k in links}),
        "bottleneck_bandwidth": None if bottleneck == math.inf else bottleneck,
    }
