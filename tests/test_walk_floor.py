"""The search's tables hold a proven floor of the schedule walk (planner.cost.walked.walk_floor):
checked by brute force against the walk itself, on random durations of every walked schedule."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cost.schedules.batch import pipeline_step
from planner.cost.schedules.timing import LayerTimes
from planner.cost.walked import sums_of, walk_floor

FIELDS = ("attn_f", "attn_b", "attn_w", "mlp_f", "mlp_b", "mlp_w", "dispatch_f", "combine_f", "dispatch_b",
          "combine_b")
CHUNKS = {"combined-1f1b": (2, 3), "zb-h1": (1, 2), "zbv": (2,), "dualpipe": (2,), "dualpipev": (2,)}


def _random_chunks(rng, p: int, v: int, n: int, a2a: bool):
    """Rank r's chunk c: 1-3 layers of random durations per plan (n plans), uneven on purpose."""
    def layer():
        vals = {f: rng.uniform(0.1, 3.0, n) for f in FIELDS}
        if not a2a:
            vals.update({f: np.zeros(n) for f in FIELDS[6:]})
        # some empty pieces, as dense layers and the embedding have
        if rng.random() < 0.3:
            vals["mlp_w"] = np.zeros(n)
        return LayerTimes(**vals)

    return tuple(tuple(tuple(layer() for _ in range(rng.integers(1, 4))) for _ in range(v)) for _ in range(p))


@pytest.mark.parametrize("name", sorted(CHUNKS))
def test_walk_floor_never_exceeds_the_walk(name):
    rng = np.random.default_rng(7)
    tight = []
    for v in CHUNKS[name]:
        for p in (2, 3, 4):
            for m in sorted({p, 2 * p, 2 * p + 2, 4 * p}):
                if name == "combined-1f1b" and v > 1 and m % p:
                    continue  # Megatron's interleaving needs m a multiple of p
                if name.startswith("dualpipe") and (m < 2 * p or m % 2) or name == "dualpipe" and p % 2:
                    continue  # DualPipe(V) needs m >= 2p, even (and DualPipe an even p)
                for a2a, delay, pair in ((False, False, True), (True, False, True), (True, True, True),
                                         (True, False, False)):
                    chunks = _random_chunks(rng, p, v, 16, a2a)
                    p2p = rng.uniform(0.0, 0.5, 16)
                    walked = pipeline_step(name, p, v, m, chunks, p2p, delay_wgrad=delay, pair_overlap=pair,
                                           interference=0.1).step
                    floor = walk_floor(name, p, v, m, [sums_of(c) for c in chunks], p2p, delay_wgrad=delay,
                                       pair_overlap=pair, interference=0.1).step
                    assert np.all(floor <= walked * (1 + 1e-12)), (name, p, v, m, a2a, delay, pair)
                    tight.append(float(np.max(floor / walked)))
    # a bound that cannot reach the walk would be useless to the search: it comes close somewhere
    assert min(tight) > 0.5 and max(tight) > 0.9
