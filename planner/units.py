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


def signed_zero(x: float, digits: int = 0) -> float:
    """``x``, or 0.0 where it rounds to zero at ``digits`` decimals: a negative number that
    rounds away would print as '-0 %' or '-0.00 s', a sign that reads as meaning something."""
    return 0.0 if round(x, digits) == 0 else x


def fmt_time(seconds: float) -> str:
    """Seconds in the unit that keeps three significant digits or so; the unit is chosen on the
    magnitude, so a negative time (a difference) reads as its positive twin with a sign."""
    seconds = signed_zero(seconds, 6)  # below the microsecond shown: no '-0 µs'
    sign, mag = ("-" if seconds < 0 else ""), abs(seconds)
    if mag >= 1:
        return f"{sign}{mag:.2f} s"
    if mag >= 1e-3:
        return f"{sign}{mag * 1e3:.1f} ms"
    if round(mag * 1e6) == 0:
        sign = ""
    return f"{sign}{mag * 1e6:.0f} µs"


def fmt_count(n: float) -> str:
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suf}"
    return f"{n:.0f}"
