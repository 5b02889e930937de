"""The bundled catalogs (``models/``, ``hw_specs/``) and reading user files.

A name resolves through catalog names and aliases (case-insensitive); a path to a ``.yaml`` file
is read as a spec, a path to a HuggingFace ``config.json`` goes through the importer. Every failure
becomes a one-paragraph :class:`~planner.errors.PlannerError` naming the file and field.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from planner.errors import PlannerError, suggest

S = TypeVar("S", bound=BaseModel)


def catalog_root() -> Path:
    """Folder holding ``models/`` and ``hw_specs/``: $PLANNER_HOME, the checkout (editable
    install), or <prefix>/share/planner (wheel install)."""
    env = os.environ.get("PLANNER_HOME")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[2], Path(sys.prefix) / "share" / "planner"]
    for c in candidates:
        if (c / "models").is_dir() and (c / "hw_specs").is_dir():
            return c
    raise PlannerError(
        "Cannot find the bundled catalogs (models/ and hw_specs/).",
        hint="Install planner with 'pip install -e .' from its checkout, or set PLANNER_HOME to the folder "
        "that holds models/ and hw_specs/.",
    )


@lru_cache(maxsize=1)
def _yaml_loader():
    """SafeLoader that also reads YAML 1.2 floats such as 989.4e12 or 1e9: PyYAML follows YAML 1.1,
    whose float pattern needs a dot and a signed exponent, and would hand these over as strings."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return Loader


def read_yaml(path: Path) -> dict:
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise PlannerError(f"Cannot read '{path}': {exc.strerror}.") from None
    try:
        data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlannerError(
            f"'{path}' is not valid YAML{where}: {problem}.",
            hint="Check the indentation and quoting there.",
        ) from None
    if not isinstance(data, dict):
        raise PlannerError(f"'{path}' must hold a YAML mapping (key: value lines), not {type(data).__name__}.")
    return data


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise PlannerError(f"Cannot read '{path}': {exc.strerror}.") from None
    except json.JSONDecodeError as exc:
        raise PlannerError(
            f"'{path}' is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    if not isinstance(data, dict):
        raise PlannerError(f"'{path}' must hold a JSON object.")
    return data


def _field_path(loc: tuple, data, missing: bool = False) -> str:
    """Dotted path of an error location as the user wrote it: pydantic's union tags ('gqa') and
    validator wrappers are dropped by following the location through the input (a missing field,
    the one part not in the input, is kept)."""
    parts: list[str] = []
    node = data
    for i, p in enumerate(loc):
        s = str(p)
        if s.startswith("function-"):
            continue
        if isinstance(node, dict) and p in node:
            node = node[p]
        elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
            node = node[p]
        elif data is not None and not (missing and i == len(loc) - 1):
            continue  # a union tag or wrapper, not a key of the input
        parts.append(s)
    return ".".join(parts)


def validation_paragraph(what: str, origin: str, exc: ValidationError, data=None) -> str:
    """One paragraph naming each bad field of a spec file (and its value, where it has one)."""
    parts = []
    for err in exc.errors()[:4]:
        loc = _field_path(err["loc"], data, missing=err["type"] == "missing")
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        shown = f" = {value!r}" if isinstance(value, (int, float, str, bool)) and err["type"] != "missing" else ""
        if err["type"] == "missing":
            parts.append(f"field '{loc}' is missing")
        elif err["type"] == "extra_forbidden":
            parts.append(f"field '{loc}' is not a known {what} field")
        elif err["type"] == "union_tag_not_found":
            key = str(err.get("ctx", {}).get("discriminator", "kind")).strip("'")
            parts.append(f"field '{loc}' needs a '{key}' key naming its variant (e.g. kind: gqa or kind: mla)")
        else:
            parts.append(f"field '{loc}'{shown}: {msg}" if loc else msg)
    more = f" (and {len(exc.errors()) - 4} more)" if len(exc.errors()) > 4 else ""
    return f"{what.capitalize()} spec '{origin}' is invalid: " + "; ".join(parts) + more + "."


def validate_spec(cls: type[S], data: dict, what: str, origin: str) -> S:
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise PlannerError(validation_paragraph(what, origin, exc, data)) from None


def spec_hash(spec: BaseModel) -> str:
    """Short stable hash of a spec's content (reported in JSON output)."""
    blob = json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


@lru_cache(maxsize=None)
def _catalog(kind: str) -> dict[str, Path]:
    """name or alias (lower-case) -> file, for 'models' or 'hw_specs'."""
    folder = catalog_root() / kind
    index: dict[str, Path] = {}
    for path in sorted(folder.glob("*.yaml")):
        data = read_yaml(path)
        for name in [data.get("name", path.stem), *data.get("aliases", [])]:
            index[str(name).lower()] = path
    return index


def _suggest_entry(kind: str, key: str) -> str:
    """'Did you mean' over names and aliases, each catalog entry offered once, by its file's name."""
    index = _catalog(kind)
    other = "hw_specs" if kind == "models" else "models"
    if key in _catalog(other):
        what = "hardware" if other == "hw_specs" else "model"
        return f"'{key}' is a {what} name, not a {'model' if kind == 'models' else 'hardware'} name."
    close = difflib.get_close_matches(key, list(index), n=6, cutoff=0.5)
    primary = list(dict.fromkeys(index[c].stem for c in close))[:3]
    if primary:
        return "Did you mean " + " or ".join(f"'{p}'" for p in primary) + "?"
    return suggest(key, catalog_names(kind))


def catalog_names(kind: str) -> list[str]:
    """Primary names (one per file) in the catalog."""
    return sorted({p.stem for p in _catalog(kind).values()})


@lru_cache(maxsize=None)
def _load_catalog_file(kind: str, path: Path):
    from planner.specs.hardware import HardwareSpec
    from planner.specs.model import ModelSpec

    cls, what = (ModelSpec, "model") if kind == "models" else (HardwareSpec, "hardware")
    return validate_spec(cls, read_yaml(path), what, str(path))


def load_model(name: str):
    """A model by catalog name/alias, a model YAML path, or a HuggingFace config.json path."""
    from planner.specs.model import ModelSpec

    path = Path(name)
    if path.suffix in (".json", ".yaml", ".yml") or path.exists():
        if not path.exists():
            raise PlannerError(f"Model file '{name}' does not exist.")
        if path.suffix == ".json":
            from planner.specs.hf_import import import_hf_config

            return import_hf_config(path)
        return validate_spec(ModelSpec, read_yaml(path), "model", str(path))
    index = _catalog("models")
    key = name.lower()
    if key not in index:
        raise PlannerError(
            f"Unknown model '{name}'.",
            hint=_suggest_entry("models", key) + " 'planner models' lists the catalog; a path to a model YAML or a "
            "HuggingFace config.json also works.",
        )
    return _load_catalog_file("models", index[key])


def load_hardware(name: str):
    """Hardware by catalog name/alias or a hardware YAML path."""
    from planner.specs.hardware import HardwareSpec

    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise PlannerError(f"Hardware file '{name}' does not exist.")
        return validate_spec(HardwareSpec, read_yaml(path), "hardware", str(path))
    index = _catalog("hw_specs")
    key = name.lower()
    if key not in index:
        raise PlannerError(
            f"Unknown hardware '{name}'.",
            hint=_suggest_entry("hw_specs", key) + " 'planner hw' lists the catalog; a path to a hardware YAML also works.",
        )
    return _load_catalog_file("hw_specs", index[key])


def all_models():
    return [load_model(n) for n in catalog_names("models")]


def all_hardware():
    return [load_hardware(n) for n in catalog_names("hw_specs")]
