"""Model overrides: ``--set KEY=VALUE`` on the command line, a launch reader's ``model_overrides``,
a runs file's ``model_overrides`` -- one route onto a :class:`~planner.specs.model.ModelSpec`.

A key is a field path of the model spec (``mtp_layers``, ``moe.num_experts``,
``attention.sliding_window``); a value is read as one YAML value, so it is typed exactly as in a
model YAML (``0`` an integer, ``2.5`` a float, ``true`` a boolean, ``null`` none, ``[0, 1]`` a
list). The overrides are merged into the model's fields and the whole spec is validated again:
an unknown field, a wrong type or a value out of range is the same one-paragraph error a model
YAML gets, naming the ``--set`` item.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from planner.errors import PlannerError
from planner.specs.catalog import _bounded_yaml_loader, check_shape, validate_spec

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_SET_ITEMS = 64
"""Most --set items on one command line (a model spec has about 60 fields)."""
_MAX_VALUE_CHARS = 4096


def parse_set_items(items: list[str] | tuple[str, ...] | None, option: str = "--set") -> dict[str, Any]:
    """``KEY=VALUE`` items as a nested mapping ({'moe': {'num_experts': 64}}), each value a YAML
    value. A key given twice is an error (the second would silently win)."""
    items = list(items or [])
    if len(items) > MAX_SET_ITEMS:
        raise PlannerError(f"{len(items)} {option} items: planner takes at most {MAX_SET_ITEMS} on one command line.")
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for item in items:
        key, eq, text = str(item).partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            raise PlannerError(f"{option} {item!r}: expected KEY=VALUE with KEY a model field such as mtp_layers or "
                               "moe.num_experts.", hint="See 'planner show-model NAME --json' for the fields.")
        if key in seen:
            raise PlannerError(f"{option} gives '{key}' twice; give each field once.")
        seen.add(key)
        if len(text) > _MAX_VALUE_CHARS:
            raise PlannerError(f"{option} {key}=...: the value is {len(text):,} characters long; at most "
                               f"{_MAX_VALUE_CHARS:,}.")
        try:
            value = yaml.load(text, Loader=_bounded_yaml_loader()) if text.strip() else None  # noqa: S506
        except Exception:  # noqa: BLE001 - a YAML error, a nesting bomb: one paragraph either way
            raise PlannerError(f"{option} {key}={text!r}: the value is not one YAML value (a number, true/false, "
                               "null, a string or a [list]).") from None
        check_shape({"v": value}, f"{option} {key}")
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise PlannerError(f"{option} gives both '{p}' and fields inside it; give one of them.")
            node = nxt
        if parts[-1] in node and isinstance(node[parts[-1]], dict):
            raise PlannerError(f"{option} gives both '{key}' and fields inside it; give one of them.")
        node[parts[-1]] = value
    return out


def merge(data: dict, overrides: dict, path: str = "") -> dict:
    """``data`` with ``overrides`` merged in, field by field (a nested mapping into a mapping, a
    group of fields into a field the model leaves empty, e.g. moe on a dense model)."""
    out = dict(data)
    for key, value in overrides.items():
        here = f"{path}{key}"
        old = out.get(key)
        if isinstance(value, dict):
            if old is None:
                out[key] = merge({}, value, here + ".")
            elif isinstance(old, dict):
                out[key] = merge(old, value, here + ".")
            else:
                raise PlannerError(f"--set {here}.{next(iter(value))}=...: '{here}' is a value ({old!r}), not a group "
                                   "of fields.")
        else:
            out[key] = value
    return out


def describe(overrides: dict, prefix: str = "") -> list[str]:
    """'key=value' lines for a source note."""
    lines = []
    for k, v in overrides.items():
        if isinstance(v, dict):
            lines += describe(v, f"{prefix}{k}.")
        else:
            lines.append(f"{prefix}{k}={v!r}" if isinstance(v, str) else f"{prefix}{k}={v}")
    return lines


def apply_overrides(model, overrides: dict | None, origin: str = "--set"):
    """The model with ``overrides`` (a nested mapping, see :func:`parse_set_items`) applied and the
    whole spec validated again; the model itself when there are none. The source list says what
    was set, so the spec hash and the report tell the edited model from the catalog's."""
    if not overrides:
        return model
    data = merge(model.model_dump(), overrides)
    data["source"] = [*model.source, f"{origin}: " + ", ".join(describe(overrides))]
    return validate_spec(type(model), data, "model", f"{model.name} with {origin} " + " ".join(describe(overrides)))
