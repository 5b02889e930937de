"""The bundled catalogs (``models/``, ``hw_specs/``) and reading user files.

A name resolves through catalog names and aliases (case-insensitive); a path to a ``.yaml`` file
is read as a spec, a path to a HuggingFace ``config.json`` goes through the importer. Every failure
becomes a one-paragraph :class:`~planner.errors.PlannerError` naming the file and field.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import sys
from functools import lru_cache, cache
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError
import yaml

from planner.errors import PlannerError, excerpt, suggest
from planner.files import MAX_NESTING, MAX_SPEC_BYTES, check_input, nesting_error, note_input, read_text
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.software import SoftwareProfile, release_prefix, release_version

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
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return Loader


MAX_NODES = 1_000_000
"""Most values a spec or saved-search file may hold once YAML aliases are expanded (a catalog
model has about 200, a saved search of 100 plans about 100,000): a 'billion laughs' file is
refused here instead of being expanded by the validation."""


class _TooDeep(Exception):
    pass


@lru_cache(maxsize=1)
def _bounded_yaml_loader():
    """The YAML 1.2 float loader with nesting capped while the document is composed (PyYAML's
    composer recurses once per level)."""
    base = _yaml_loader()

    class Loader(base):  # type: ignore[misc, valid-type]
        _depth = 0

        def construct_mapping(self, node, deep=False):
            # YAML requires unique keys; PyYAML keeps the last silently ('gpus: 8' then 'gpus: 16').
            seen: dict = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    if key_node.value in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"the key '{key_node.value[:60]}' is given twice (first at line "
                            f"{seen[key_node.value] + 1})", key_node.start_mark)
                    seen[key_node.value] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

        def compose_node(self, parent, index):
            self._depth += 1
            try:
                if self._depth > MAX_NESTING + 1:
                    raise _TooDeep()
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return Loader


def check_shape(data, origin: str) -> None:
    """Refuse data nested deeper than MAX_NESTING or holding more than MAX_NODES values once
    shared references (YAML aliases) are counted as the copies validation would walk."""
    sizes: dict[int, int] = {}

    def size(node, depth: int) -> int:
        if not isinstance(node, (dict, list, tuple)):
            return 1
        if depth > MAX_NESTING:
            raise nesting_error(origin)
        key = id(node)
        if key in sizes:
            return sizes[key]
        children = node.values() if isinstance(node, dict) else node
        total = 1
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_NODES:
                raise PlannerError(
                    f"'{origin}' holds more than {MAX_NODES:,} values (YAML aliases, &name / *name, counted as the "
                    "copies they stand for), far more than any spec or saved search.",
                    hint="Check that it is the file you meant; planner does not expand alias bombs.",
                )
        sizes[key] = total
        return total

    size(data, 0)


def parse_yaml_text(text: str, origin: str, *, not_mapping: str | None = None) -> dict:
    """A YAML mapping (safe tags only, YAML 1.2 floats, unique keys, nesting and alias expansion
    capped): every YAML file planner reads goes through here. ``not_mapping`` words the refusal
    of a document that is not a mapping."""
    try:
        data = yaml.load(text, Loader=_bounded_yaml_loader())  # noqa: S506 (a SafeLoader subclass)
    except _TooDeep:
        raise nesting_error(origin) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlannerError(
            f"'{origin}' is not valid YAML{where}: {problem}.",
            hint="Check the indentation and quoting there.",
        ) from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. an integer of 5,000 digits
        raise PlannerError(f"'{origin}' holds a value planner cannot read: {str(exc)[:200]}.") from None
    if not isinstance(data, dict):
        raise PlannerError(f"'{origin}' " + (not_mapping or "must hold a YAML mapping (key: value lines), not "
                                             f"{type(data).__name__}") + ".")
    check_shape(data, origin)
    return data


def read_yaml(path: Path, what: str = "YAML", limit: int = MAX_SPEC_BYTES) -> dict:
    """A YAML mapping from a regular UTF-8 file of at most ``limit`` bytes (see :func:`parse_yaml_text`)."""
    return parse_yaml_text(read_text(path, what, limit), str(path))


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is too large for a floating-point number")
    return value


def parse_json_text(text: str, origin: str) -> dict:
    """A JSON object; NaN, Infinity, overflowing numbers and deep nesting are errors."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise PlannerError(
            f"'{origin}' is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except RecursionError:  # the json scanner's own guard, far below Python's stack
        raise nesting_error(origin) from None
    except ValueError as exc:  # NaN/Infinity, 1e400, an integer of more than 4,300 digits
        raise PlannerError(f"'{origin}' is not valid JSON: {str(exc)[:200]}.") from None
    if not isinstance(data, dict):
        raise PlannerError(f"'{origin}' must hold a JSON object.")
    check_shape(data, origin)
    return data


def read_json(path: Path, what: str = "JSON", limit: int = MAX_SPEC_BYTES) -> dict:
    """A JSON object from a regular UTF-8 file of at most ``limit`` bytes."""
    return parse_json_text(read_text(path, what, limit), str(path))


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
        shown = f" = {excerpt(repr(value))}" if isinstance(value, (int, float, str, bool)) and err["type"] != "missing" else ""
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
    """Short stable hash of a spec's content (reported in JSON output). Fields at their defaults
    are left out, so a field added to a spec class later (with its default) leaves the hashes of
    existing specs as they were."""
    blob = json.dumps(spec.model_dump(mode="json", exclude_defaults=True), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


@cache
def _catalog(kind: str) -> dict[str, Path]:
    """name or alias (lower-case) -> file, for 'models' or 'hw_specs'."""
    folder = catalog_root() / kind
    index: dict[str, Path] = {}
    for path in sorted(folder.glob("*.yaml")):
        for name in catalog_names_of(path):
            index[str(name).lower()] = path
    return index


_PLAIN = r"[A-Za-z][A-Za-z0-9_.+-]*"
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"}  # PyYAML reads these as bools or None
_NAME_LINE = re.compile(rf"^name:[ \t]*({_PLAIN})[ \t]*(?:#.*)?$", re.M)
_ALIASES_LINE = re.compile(rf"^aliases:[ \t]*\[((?:[ \t]*{_PLAIN}[ \t]*(?:,[ \t]*{_PLAIN}[ \t]*)*)?)\][ \t]*(?:#.*)?$", re.M)
_KEY_LINE = re.compile(r"^(name|aliases)[ \t]*:", re.M)


def catalog_names_of(path: Path) -> list:
    """A catalog file's name (its file name when it has none) and aliases. The index only needs
    those two keys: read from their top-level lines where they are plain (``name: x``,
    ``aliases: [a, b]``, as in every bundled file), without parsing the rest (40 files of YAML
    are a tenth of a second of every command); from the parsed file otherwise."""
    text = read_text(path, "YAML", MAX_SPEC_BYTES)
    keys = _KEY_LINE.findall(text)
    names, aliases = _NAME_LINE.findall(text), _ALIASES_LINE.findall(text)
    if keys.count("name") == len(names) <= 1 and keys.count("aliases") == len(aliases) <= 1:
        found = [a.strip() for a in aliases[0].split(",") if a.strip()] if aliases else []
        plain = [names[0] if names else path.stem, *found]
        if not _YAML_WORDS.intersection(x.lower() for x in plain):
            return plain
    data = read_yaml(path)
    return [data.get("name", path.stem), *data.get("aliases", [])]


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


@cache
def _load_catalog_file(kind: str, path: Path):
    cls, what = (ModelSpec, "model") if kind == "models" else (HardwareSpec, "hardware")
    return validate_spec(cls, read_yaml(path, what), what, str(path))


def _catalog_entry(kind: str, path: Path):
    note_input(path, "model" if kind == "models" else "hardware")  # cached: noted on every use
    return _load_catalog_file(kind, path)


def _check_name(name, what: str, option: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise PlannerError(f"The {what} name is empty.",
                           hint=f"Give {option} a catalog name (see 'planner {'models' if what == 'model' else 'hw'}') "
                           f"or the path of a {what} file.")
    if len(name) > 4096:
        raise PlannerError(f"The {what} name given to {option} is {len(name):,} characters long; names and paths are "
                           "at most 4,096.")
    return name


def model_file(name: str) -> Path | None:
    """The file :func:`load_model` reads for ``name`` (a model YAML, a config.json, a model folder's
    config.json), or None for a catalog name."""
    name = _check_name(name, "model", "--model")
    path = Path(name)
    if path.is_dir():
        config = path / "config.json"
        if config.is_file():
            return config
        raise PlannerError(
            f"'{name}' is a folder, not a model file, and holds no config.json.",
            hint="Give a model YAML, a HuggingFace config.json, or the HuggingFace model folder that holds it.",
        )
    if path.suffix.lower() in (".json", ".yaml", ".yml") or path.exists() or os.sep in name:
        return path
    return None


def load_model(name: str):
    """A model by catalog name/alias, a model YAML path, a HuggingFace config.json path, or a
    HuggingFace model folder (its config.json is read)."""
    path = model_file(name)
    if path is not None:
        check_input(path, "model", folder_hint="Give its config.json or a model YAML.")
        if path.suffix.lower() == ".json":
            from planner.specs.hf_import import import_hf_config  # noqa: PLC0415  # cycle: hf_import reads via this module

            return import_hf_config(path)
        return validate_spec(ModelSpec, read_yaml(path, "model"), "model", str(path))
    index = _catalog("models")
    key = name.lower()
    if key not in index:
        raise PlannerError(
            f"Unknown model '{name}'.",
            hint=_suggest_entry("models", key) + " 'planner models' lists the catalog; a path to a model YAML or a "
            "HuggingFace config.json also works.",
        )
    return _catalog_entry("models", index[key])


def load_hardware(name: str):
    """Hardware by catalog name/alias or a hardware YAML path."""
    name = _check_name(name, "hardware", "--hw")
    path = Path(name)
    if path.suffix.lower() in (".yaml", ".yml") or path.is_dir() or os.sep in name:
        check_input(path, "hardware", folder_hint="Give a hardware YAML (see hw_specs/).")
        return validate_spec(HardwareSpec, read_yaml(path, "hardware"), "hardware", str(path))
    index = _catalog("hw_specs")
    key = name.lower()
    if key not in index:
        raise PlannerError(
            f"Unknown hardware '{name}'.",
            hint=_suggest_entry("hw_specs", key) + " 'planner hw' lists the catalog; a path to a hardware YAML also works.",
        )
    return _catalog_entry("hw_specs", index[key])


def all_models():
    return [load_model(n) for n in catalog_names("models")]


def all_hardware():
    return [load_hardware(n) for n in catalog_names("hw_specs")]


# ---------------------------------------------------------------------------------------------
# Software profiles (software/<name>.yaml): the framework releases a plan can be launched with.
# ---------------------------------------------------------------------------------------------
@cache
def _load_software_file(path: Path):
    return validate_spec(SoftwareProfile, read_yaml(path, "software profile"), "software profile", str(path))


def software_names() -> list[str]:
    """Primary names (one per file) of the bundled software profiles."""
    return catalog_names("software")


def load_software(name: str):
    """A software profile by catalog name/alias or a profile YAML path."""
    name = _check_name(name, "software profile", "--software")
    path = Path(name)
    if path.suffix.lower() in (".yaml", ".yml") or path.is_dir() or os.sep in name:
        check_input(path, "software profile", folder_hint="Give a software profile YAML (see software/).")
        return validate_spec(SoftwareProfile, read_yaml(path, "software profile"), "software profile", str(path))
    index = _catalog("software")
    key = name.lower()
    if key not in index:
        near = _nearest_release(key, index)
        if near is not None:
            note_input(near, "software profile")
            prof = _load_software_file(near)
            same = _padded(prof.version_tuple) == _padded(release_version(key) or ())
            return prof if same else prof.model_copy(update={"stands_for": name})
        close = difflib.get_close_matches(key, list(index), n=3, cutoff=0.5)
        hint = ("Did you mean " + " or ".join(f"'{index[c].stem}'" for c in close) + "? ") if close else ""
        raise PlannerError(
            f"Unknown software profile '{name}'.",
            hint=hint + "'planner software' lists the releases planner knows; a path to a profile YAML also works.",
        )
    note_input(index[key], "software profile")
    return _load_software_file(index[key])


def _nearest_release(key: str, index: dict[str, Path]) -> Path | None:
    """The profile file that stands for release ``key`` planner has none of: among the releases of
    the framework its name names (by the framework or an alias's prefix: 'megatron-core-0.20',
    'mcore-0.20'), the newest at or below its number (a patch release: its minor's profile; a newer
    release: the newest known, which lacks only what came after it). None: no such framework, or a
    release older than every one planner knows (a newer profile would offer levers it lacks, and a
    search would credit them)."""
    prefix, asked = release_prefix(key), release_version(key)
    if prefix is None or asked is None:
        return None
    found: dict[Path, tuple[int, ...]] = {}
    for alias, path in index.items():
        if release_prefix(alias) == prefix and path not in found:
            prof = _load_software_file(path)
            found[path] = prof.version_tuple
    if not found:
        return None
    below = [p for p, v in found.items() if _padded(v) <= _padded(asked)]
    return max(below, key=lambda p: _padded(found[p])) if below else None


def _padded(v: tuple[int, ...]) -> tuple[int, ...]:
    return v + (0,) * (4 - len(v))


def all_software():
    return [load_software(n) for n in software_names()]


def newest_release(framework: str):
    """The newest release planner knows of ``framework`` (None: none); a launcher's default
    (planner.launchers.registry.default_software)."""
    found = [p for p in all_software() if p.framework == framework]
    return max(found, key=lambda p: p.version_tuple) if found else None
