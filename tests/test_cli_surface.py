"""The command-line surface users script against is frozen (DESIGN.md section 6: names are added
to, never renamed): every command, its options, their flags and defaults. A change to the surface
fails here until tests/data/cli_surface.json is regenerated on purpose:

    PYTHONPATH=. python tests/test_cli_surface.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SURFACE = Path(__file__).parent / "data" / "cli_surface.json"


def surface() -> dict:
    """{command: {option name: {flags, default, type}}} read from the typer app."""
    import typer.main

    from planner.cli import _register, app

    _register()
    group = typer.main.get_command(app)
    out = {}
    for name in sorted(group.commands):
        cmd = group.commands[name]
        params = {}
        for p in cmd.params:
            default = p.default
            if hasattr(default, "value"):
                default = default.value
            params[p.name] = {"flags": sorted(getattr(p, "opts", [])) + sorted(getattr(p, "secondary_opts", [])),
                              "default": default if isinstance(default, (str, int, float, bool, type(None))) else str(default),
                              "flag": bool(getattr(p, "is_flag", False)), "multiple": bool(getattr(p, "multiple", False)),
                              "required": bool(p.required)}
        out[name] = params
    return out


def test_the_cli_surface_is_frozen():
    expected = json.loads(SURFACE.read_text())
    got = json.loads(json.dumps(surface()))
    removed = sorted(set(expected) - set(got))
    assert not removed, f"commands removed: {removed}"
    for cmd, params in expected.items():
        for name, spec in params.items():
            assert name in got[cmd], f"'{cmd}' lost its option {name} ({spec['flags']})"
            assert got[cmd][name] == spec, f"'{cmd} {spec['flags']}' changed: {spec} -> {got[cmd][name]}"
    assert got == expected, "new commands or options: regenerate tests/data/cli_surface.json (see the module docstring)"


if __name__ == "__main__":
    SURFACE.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SURFACE}", file=sys.stderr)
