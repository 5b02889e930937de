"""Prices per GPU-hour for `planner compare`'s cost per token and per training run.

Two routes, in increasing priority: the bundled table ``hw_specs/prices/on_demand.yaml`` (on-demand
list prices, labelled as estimates with their source and date: data, not code) and
``--price NAME=USD`` on the command line. A price is per GPU-hour of every GPU the job holds,
including the ones a partly filled NVLink domain leaves idle (they are rented all the same).
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Annotated

from pydantic import Field

from planner.errors import PlannerError
from planner.specs.catalog import catalog_root, load_hardware, read_yaml, validate_spec
from planner.specs.common import NotBool, Spec

MAX_USD_PER_GPU_HOUR = 1000.0
"""A GPU-hour above $1,000 is a typo (per-instance or per-rack price given where per-GPU belongs):
on-demand list prices of the largest GPUs are about $10 per GPU-hour."""

UsdPerGpuHour = Annotated[float, NotBool, Field(gt=0.0, le=MAX_USD_PER_GPU_HOUR)]


class PriceEntry(Spec):
    usd_per_gpu_hour: UsdPerGpuHour
    source: str = Field(min_length=3)


class PriceTable(Spec):
    kind: str
    currency: str
    as_of: str
    prices: dict[str, PriceEntry]


@dataclass(frozen=True)
class Price:
    """US dollars per GPU-hour and where the number comes from."""

    usd_per_gpu_hour: float
    source: str
    estimate: bool
    """True for the bundled table's list prices, False for a price the user gave."""


def bundled_prices() -> dict[str, Price]:
    """The bundled table, by catalog hardware name."""
    path = catalog_root() / "hw_specs" / "prices" / "on_demand.yaml"
    table = validate_spec(PriceTable, read_yaml(path, "price table"), "price table", str(path))
    return {name: Price(e.usd_per_gpu_hour, e.source, table.kind == "estimate") for name, e in table.prices.items()}


def parse_price(text: str) -> tuple[str, float]:
    """'NAME=USD' -> (NAME as given, USD per GPU-hour), bounded."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip().removeprefix("$")
    try:
        usd = float(value) if sep and name else math.nan
    except ValueError:
        usd = math.nan
    if not math.isfinite(usd):
        raise PlannerError(f"--price '{text}' is not NAME=USD.",
                           hint="Give a hardware name and its price per GPU-hour in US dollars, e.g. --price h100=2.5.")
    if not 0 < usd <= MAX_USD_PER_GPU_HOUR:
        raise PlannerError(f"--price '{text}': {usd:g} USD per GPU-hour is outside (0, {MAX_USD_PER_GPU_HOUR:,.0f}].",
                           hint="Give the price of one GPU for one hour (an 8-GPU instance at $40/h is 5 per GPU-hour).")
    return name, usd


def prices_for(systems: list[str], given: list[str] | None) -> dict[str, Price]:
    """The price of each compared system (catalog names): --price where given, else the bundled
    table, else none. A --price for a system not compared, or given twice, is refused."""
    out = {n: p for n, p in bundled_prices().items() if n in systems}
    seen: set[str] = set()
    for text in given or []:
        name, usd = parse_price(text)
        hw = load_hardware(name).name
        if hw not in systems:
            raise PlannerError(f"--price '{text}' names {hw}, which is not among the compared systems "
                               f"({', '.join(systems)}).", hint="Give a price for a system passed with --hw.")
        if hw in seen:
            raise PlannerError(f"--price gives {hw} a price twice.", hint="Give each system's price once.")
        seen.add(hw)
        out[hw] = Price(usd, "--price", False)
    return out
