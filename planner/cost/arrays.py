"""Helpers that let the cost formulas take plain numbers (explain) or numpy arrays (the search's
vectorized tables) through the same code."""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

Num = float | np.ndarray
"""A number of the model, or one per plan of a batch (the search's tables): the formulas take both."""
Count = int | np.ndarray
"""An integer (a degree, a count) or one per plan of a batch."""
Flag = bool | np.ndarray
"""A switch, or one per plan of a batch."""


_PLAIN = (float, int, bool)


def _scalar(x) -> bool:
    """``np.ndim(x) == 0``, without numpy's call for plain Python numbers (the formulas test
    scalars this way some hundred thousand times per search)."""
    return type(x) in _PLAIN or np.ndim(x) == 0


def where(cond, a, b):
    """``a if cond else b`` for scalars, elementwise for arrays."""
    if _scalar(cond) and _scalar(a) and _scalar(b):
        return a if cond else b
    return np.where(cond, a, b)


def maximum(*xs):
    """Elementwise maximum of scalars or arrays (plain max for scalars)."""
    if all(_scalar(x) for x in xs):
        return max(xs)
    return reduce(np.maximum, xs)


def minimum(a, b):
    if _scalar(a) and _scalar(b):
        return min(a, b)
    return np.minimum(a, b)


def hashable(*xs) -> bool:
    try:
        hash(xs)
        return True
    except TypeError:
        return False


def any_true(x) -> bool:
    """Whether a condition holds for the scalar, or for any element of the array (a block's
    communication is added when some plan of the batch has the group; the others get zero)."""
    if type(x) in _PLAIN:
        return bool(x)
    return bool(np.any(x))


def as_int(x):
    """``int(x)`` (truncation) for scalars, elementwise for arrays."""
    if _scalar(x):
        return int(x)
    return np.trunc(x)


def round_int(x):
    """Python's ``round(x)`` (half to even) for scalars, elementwise for arrays."""
    if _scalar(x):
        return round(x)
    return np.round(x)


def ceil_log2(n):
    """``ceil(log2(n))`` for scalars (an int) and arrays."""
    if _scalar(n):
        return math.ceil(math.log2(n))
    return np.ceil(np.log2(n))


def ceil(x):
    """``math.ceil(x)`` for scalars (an int), elementwise for arrays."""
    if _scalar(x):
        return math.ceil(x)
    return np.ceil(x)
