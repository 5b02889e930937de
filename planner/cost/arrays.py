"""Helpers that let the cost formulas take plain numbers (explain) or numpy arrays (the search's
vectorized tables) through the same code."""

from __future__ import annotations

from functools import reduce

import numpy as np


def where(cond, a, b):
    """``a if cond else b`` for scalars, elementwise for arrays."""
    if np.ndim(cond) == 0 and np.ndim(a) == 0 and np.ndim(b) == 0:
        return a if cond else b
    return np.where(cond, a, b)


def maximum(*xs):
    """Elementwise maximum of scalars or arrays (plain max for scalars)."""
    if all(np.ndim(x) == 0 for x in xs):
        return max(xs)
    return reduce(np.maximum, xs)


def minimum(a, b):
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return min(a, b)
    return np.minimum(a, b)


def hashable(*xs) -> bool:
    try:
        hash(xs)
        return True
    except TypeError:
        return False
