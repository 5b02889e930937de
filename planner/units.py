"""Units. Inside the code memory is in bytes, bandwidth in bytes/s, time in seconds and
compute in FLOP/s; these helpers convert only for display, always with the unit named."""

from __future__ import annotations

GB = 1e9
GiB = float(2**30)
MiB = float(2**20)
TB = 1e12
TFLOP = 1e12


def fmt_gib(nbytes: float, digits: int = 1) -> str:
    return f"{nbytes / GiB:.{digits}f} GiB"


def fmt_gb(nbytes: float, digits: int = 1) -> str:
    return f"{nbytes / GB:.{digits}f} GB"


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def fmt_count(n: float) -> str:
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suf}"
    return f"{n:.0f}"
