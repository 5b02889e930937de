"""The `planner` command line: thin typer commands over resolve-then-validate steps.

Shared options are declared once in :mod:`planner.options`; each command lives in
``planner/commands/<name>.py`` and imports heavy modules (numpy, ortools, matplotlib) only when it
runs, so ``planner --help`` stays fast. Every :class:`~planner.errors.PlannerError` is printed as
one paragraph with a non-zero exit, never as a traceback.
"""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="planner",
    help=(
        "Find the parallel layout to launch for a model on a GPU cluster: will it fit in HBM, how "
        "fast will it run, and what changes on Blackwell. Memory in GiB (2^30 bytes) and GB (1e9) is "
        "labeled; --json on every command gives stable, scriptable output."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _register() -> None:
    # Importing a command module registers its commands on `app`.
    from planner.commands import catalog, explain  # noqa: F401

    for optional in ("search", "compare", "export", "memtrace", "calibrate", "validate"):
        try:
            __import__(f"planner.commands.{optional}")
        except ModuleNotFoundError as exc:  # a command whose module is not written yet
            if exc.name != f"planner.commands.{optional}":
                raise


def _cli_exception_types() -> tuple[tuple, tuple, tuple]:
    """(usage errors, aborts, exits) of the installed typer. typer >= 0.2x vendors its own click
    (typer._click, whose exceptions derive from typer.TyperException) and no longer installs
    click; older typer raises click's own exceptions. Catch both, import click only if present."""
    usage: list[type] = [typer.TyperException] if hasattr(typer, "TyperException") else []
    aborts: list[type] = [typer.Abort]
    exits: list[type] = [typer.Exit]
    try:
        import click
    except ImportError:
        pass
    else:
        usage.append(click.ClickException)
        aborts.append(click.exceptions.Abort)
        exits.append(click.exceptions.Exit)
    return tuple(usage), tuple(aborts), tuple(exits)


def main(argv: list[str] | None = None) -> int:
    from planner.errors import PlannerError

    _register()
    usage_errors, aborts, exits = _cli_exception_types()
    try:
        result = app(args=argv, standalone_mode=False)
    except PlannerError as exc:
        typer.echo(f"Error: {exc.paragraph()}", err=True)
        return exc.exit_code
    except exits as exc:
        return getattr(exc, "exit_code", 0)
    except aborts:
        typer.echo("Aborted.", err=True)
        return 130
    except usage_errors as exc:
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            typer.echo(f"Error: {exc}", err=True)
        return getattr(exc, "exit_code", 2)
    except KeyboardInterrupt:
        return 130
    # In standalone_mode=False, click returns the exit code of ctx.exit() (e.g. --help) as the result.
    return result if isinstance(result, int) else 0


def entry() -> None:
    sys.exit(main())
