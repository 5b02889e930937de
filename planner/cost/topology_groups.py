"""Where a plan's process groups sit relative to NVLink domains (the part of the topology the
memory model needs: NCCL buffer sizes differ for groups that cross domains).

Ranks follow Megatron-Core's RankGenerator: the dense grid in order tp-cp-dp-pp (TP fastest; EP is
carved out of the expert grid), the expert grid in order tp(etp)-ep-dp(edp)-pp. A group of size n
whose members are ``stride`` ranks apart spans ``stride * (n - 1) + 1`` consecutive ranks. Degrees
may be numpy arrays (the search evaluates many plans at once).
"""

from __future__ import annotations

import numpy as np


def group_stride(deg, name: str):
    """(stride, size) of one group of kind ``name`` in global rank order."""
    d = deg
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


def default_domain_fill(domain: int, gpus: int, tpcp, etpep):
    """The largest GPU count up to the domain size that keeps the NVLink-bound blocks (TP x CP and
    ETP x EP) whole: a multiple of both blocks that fit in one domain (e.g. 64 of 72 for EP64)."""
    b1 = np.where(np.asarray(tpcp) <= domain, tpcp, 1)
    b2 = np.where(np.asarray(etpep) <= domain, etpep, 1)
    step = np.lcm(b1, b2)
    cap = min(domain, gpus)
    fill = (cap // step) * step
    fill = np.where(fill > 0, fill, cap)
    return fill if np.ndim(fill) else int(fill)


def domain_fill(setup):
    """GPUs used per NVLink domain: the job's --domain-fill, else the default above."""
    D = setup.hw.domain_size
    if setup.job.domain_fill:
        return min(setup.job.domain_fill, D)
    d = setup.deg
    return default_domain_fill(D, setup.job.gpus, d.tp * d.cp, d.etp * d.ep)


def spans_domains(stride, size, fill):
    """Whether a group with this stride and size reaches beyond one domain's ``fill`` GPUs."""
    span = stride * (np.asarray(size) - 1) + 1
    out = (np.asarray(size) > 1) & (span > fill)
    return out if np.ndim(out) else bool(out)


def group_spans_domains(setup, name: str) -> bool:
    stride, size = group_stride(setup.deg, name)
    return spans_domains(stride, size, domain_fill(setup))
