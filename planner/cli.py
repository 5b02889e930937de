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

    for optional in ("search", "compare", "export", "memtrace", "calibrate"):
        try:
            __import__(f"planner.commands.{optional}")
        except ModuleNotFoundError as exc:  # a command whose module is not written yet
            if exc.name != f"planner.commands.{optional}":
                raise


def main(argv: list[str] | None = None) -> int:
    import click

    from planner.errors import PlannerError

    _register()
    try:
        app(args=argv, standalone_mode=False)
    except PlannerError as exc:
        typer.echo(f"Error: {exc.paragraph()}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        typer.echo("Aborted.", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


def entry() -> None:
    sys.exit(main())
