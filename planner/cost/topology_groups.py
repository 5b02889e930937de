"""Where a plan's process groups sit relative to NVLink domains (the part of the topology the
memory model needs: NCCL buffer sizes differ for groups that cross domains).

Ranks follow Megatron-Core's RankGenerator: the dense grid in order tp-cp-dp-pp (TP fastest; EP is
carved out of the expert grid), the expert grid in order tp(etp)-ep-dp(edp)-pp. A group of size n
whose members are ``stride`` ranks apart spans ``stride * n`` consecutive ranks.
"""

from __future__ import annotations


def group_stride(setup, name: str) -> tuple[int, int]:
    """(stride, size) of one group of kind ``name`` in global rank order."""
    d = setup.deg
    table = {
        "tp": (1, d.tp),
        "cp": (d.tp, d.cp),
        "dp": (d.tp, d.dp * d.cp),  # the distributed optimizer's DP x CP group
        "pp": (d.tp * d.cp * d.dp, d.pp),
        "etp": (1, d.etp),
        "ep": (d.etp, d.ep),
        "edp": (d.etp * d.ep, d.edp),
    }
    return table[name]


def domain_fill(setup) -> int:
    """GPUs used per NVLink domain: the job's --domain-fill, else the largest count up to the
    domain size that keeps the NVLink-bound groups (TP*CP and ETP*EP blocks) whole."""
    D = setup.hw.domain_size
    if setup.job.domain_fill:
        return min(setup.job.domain_fill, D)
    d = setup.deg
    blocks = [b for b in (d.tp * d.cp, d.etp * d.ep) if b <= D]
    for k in range(min(D, setup.job.gpus), 0, -1):
        if all(k % b == 0 for b in blocks):
            return k
    return D


def group_spans_domains(setup, name: str) -> bool:
    stride, size = group_stride(setup, name)
    if size <= 1:
        return False
    fill = domain_fill(setup)
    span = stride * (size - 1) + 1
    return span > fill or (fill % (stride * size) != 0 and stride * size < fill and span > fill)
