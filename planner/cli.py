"""The `planner` command line: thin typer commands over resolve-then-validate steps.

Shared options are declared once in :mod:`planner.options`; each command lives in
``planner/commands/<name>.py`` and imports heavy modules (numpy, ortools, matplotlib) only when it
runs, so ``planner --help`` stays fast. Every :class:`~planner.errors.PlannerError` is printed as
one paragraph with a non-zero exit, never as a traceback; any other exception is a bug and gets one
paragraph asking for a report (exit 70; ``--debug`` shows the traceback). Exit statuses: see
``EXIT_*`` below and the README.
"""

from __future__ import annotations

import os
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


EXIT_OK = 0
EXIT_RULE = 1
"""check and explain: the plan breaks a launcher or model rule, or does not fit in memory."""
EXIT_INPUT = 2
"""Bad input: an unknown name, a malformed or missing file, a value out of range, a bad option."""
EXIT_NOTHING_FITS = 3
"""search (and compare): no plan fits."""
EXIT_INTERNAL = 70
"""An unexpected exception: a bug in planner (EX_SOFTWARE of sysexits.h)."""
EXIT_INTERRUPTED = 130

_debug = False


def _print_version(value: bool) -> None:
    if value:
        from planner import __version__

        typer.echo(f"planner {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global_options(
    debug: bool = typer.Option(False, "--debug", help="On an unexpected error, show the Python traceback too."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print planner's version and exit."),
) -> None:
    """Options before the command name apply to every command."""
    global _debug
    _debug = _debug or debug


SHELLS = ("bash", "zsh", "fish", "powershell")


@app.command("completion")
def completion_cmd(
    shell: str = typer.Argument(..., help="bash, zsh, fish or powershell."),
) -> None:
    """Print the shell completion script: eval "$(planner completion bash)" in ~/.bashrc (zsh: ~/.zshrc;
    fish: planner completion fish > ~/.config/fish/completions/planner.fish)."""
    from planner.errors import PlannerError

    if shell not in SHELLS:
        raise PlannerError(f"planner completion knows no shell '{shell}'.", hint="Choose bash, zsh, fish or powershell.")
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name="planner", complete_var="_PLANNER_COMPLETE", shell=shell))


def one_line(text: str) -> str:
    """A message as one line: control characters (newlines, tabs, escapes) a user's input may
    carry into it are shown escaped, so an error is always one paragraph."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


_ASCII_FALLBACK = {
    "\u00b7": "-", "\u00d7": "x", "\u2192": "->", "\u2190": "<-", "\u2013": "-", "\u2014": "--", "\u2022": "*",
    "\u2248": "~", "\u2264": "<=", "\u2265": ">=", "\u00b1": "+-", "\u00b5": "u", "\u03bc": "u", "\u00b2": "^2",
    "\u2026": "...", "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a7": "S", "\u2212": "-",
}


def _fallback_errors(exc: UnicodeEncodeError):
    """Codec error handler: the characters planner prints that a narrow terminal encoding (ASCII
    under LANG=C, Latin-1) lacks become ASCII look-alikes, anything else a '?'."""
    bad = exc.object[exc.start:exc.end]
    return "".join(_ASCII_FALLBACK.get(c, "?") for c in bad), exc.end


def _protect_streams() -> None:
    """Make stdout and stderr fall back instead of raising on characters their encoding lacks."""
    import codecs

    try:
        codecs.lookup_error("planner-fallback")
    except LookupError:
        codecs.register_error("planner-fallback", _fallback_errors)
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if enc in ("utf8", "utf8sig", "utf16", "utf32"):
            continue
        try:
            stream.reconfigure(errors="planner-fallback")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass


def _echo_error(text: str) -> None:
    try:
        typer.echo(text, err=True)
    except (OSError, ValueError):  # stderr closed or broken: nothing more to do
        pass


def _internal_error(exc: BaseException) -> int:
    """One paragraph for an exception nobody expected (--debug adds the traceback)."""
    if _debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    what = "ran out of memory" if isinstance(exc, MemoryError) else f"hit an unexpected {type(exc).__name__}"
    detail = one_line(str(exc))[:300]
    _echo_error(
        f"Error: planner {what}{': ' + detail if detail else ''}. This is a bug in planner, not in your input: "
        "please report it on planner's issue tracker with the command line and the files it read. "
        + ("" if _debug else "Run the command again with --debug (planner --debug ...) to see the traceback.")
    )
    return EXIT_INTERNAL


def _strip_debug(argv: list[str]) -> list[str]:
    """--debug is accepted anywhere on the line, not only before the command."""
    global _debug
    if "--debug" in argv:
        _debug = True
        return [a for a in argv if a != "--debug"]
    return argv


HELP_WIDTH_PIPED = 100
"""Columns of --help when stdout is no terminal and COLUMNS is unset: rich would assume 80 and
squeeze the option table's help column to a word or two a line (`planner search --help | less`)."""


def help_width() -> int | None:
    """The width typer's rich help renders at: the terminal's (rich reads it, or COLUMNS), else
    HELP_WIDTH_PIPED."""
    if os.environ.get("COLUMNS") or os.environ.get("TERMINAL_WIDTH") or sys.stdout.isatty():
        return None
    return HELP_WIDTH_PIPED


def _set_help_width() -> None:
    import typer.rich_utils as rich_utils

    if hasattr(rich_utils, "MAX_WIDTH"):  # typer reads it when it builds each help console
        width = help_width()
        rich_utils.MAX_WIDTH = width if width is not None else rich_utils.MAX_WIDTH


def main(argv: list[str] | None = None) -> int:
    global _debug
    from planner.errors import PlannerError
    from planner.files import reset_inputs

    _protect_streams()
    if any(a in ("--help", "-h") for a in (sys.argv[1:] if argv is None else argv)):
        _set_help_width()  # rich is imported only where help is asked for (planner --help stays fast)
    _debug = os.environ.get("PLANNER_DEBUG", "") not in ("", "0")
    args = _strip_debug(list(sys.argv[1:] if argv is None else argv))
    reset_inputs()
    usage_errors, aborts, exits = _cli_exception_types()
    if os.environ.get("_PLANNER_COMPLETE"):  # the shell asks for completions (planner completion SHELL)
        from typer._completion_classes import completion_init

        completion_init()
    try:
        _register()
        result = app(args=args, prog_name="planner", standalone_mode=False)
    except PlannerError as exc:
        _echo_error(f"Error: {one_line(exc.paragraph())}")
        return exc.exit_code
    except exits as exc:
        return getattr(exc, "exit_code", 0)
    except aborts:
        _echo_error("Aborted.")
        return EXIT_INTERRUPTED
    except usage_errors as exc:
        return _usage_error(exc)
    except KeyboardInterrupt:
        _echo_error("Interrupted.")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a reader that went away
    except Exception as exc:  # noqa: BLE001 - the last line of defense: one paragraph, never a traceback
        return _internal_error(exc)
    # In standalone_mode=False, click returns the exit code of ctx.exit() (e.g. --help) as the result.
    return result if isinstance(result, int) else 0


def _usage_error(exc) -> int:
    """A bad option or argument, as one paragraph naming the command's --help."""
    fmt = getattr(exc, "format_message", None)
    message = fmt() if callable(fmt) else str(exc)
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "planner"
    _echo_error(f"Error: {one_line(message.strip()).rstrip('.')}. Try '{path} --help' for the options.")
    code = getattr(exc, "exit_code", EXIT_INPUT)
    return code if isinstance(code, int) and code else EXIT_INPUT


def _quiet_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so that Python's exit flush stays silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# Objects a collection of the youngest generation waits for. A search allocates millions of
# small, short-lived objects beside a heap of some hundreds of MB, and CPython's default (700) ran
# some 660 young and 5 full collections, 0.3 of a default search's 3 s (measured with
# gc.callbacks); at 200,000 it runs one. mypy's command sets the same (mypy/main.py,
# gc.set_threshold(200 * 1000, 30, 30)). Peak memory did not move.
GC_THRESHOLD = (200_000, 30, 30)


def entry() -> None:
    """The `planner` program. The cost tables multiply many small matrices: multithreaded BLAS only
    adds contention on small machines (measured ~100x slower on 2 busy cores), so the program runs
    single-threaded BLAS unless the user says otherwise (set before numpy is first imported); and
    it collects cyclic garbage less often (GC_THRESHOLD). It ends without the interpreter's teardown
    (_hard_exit)."""
    import gc
    import os

    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    gc.set_threshold(*GC_THRESHOLD)
    _hard_exit(main())


def _hard_exit(code: int) -> None:
    """Flush the output and end the process at once. The interpreter's teardown frees a search's
    heap object by object and runs a last full collection: some 0.2 s of a 4 s default search
    (measured on the 2-core machine), after everything was written. Every file planner writes is
    closed and renamed into place before the command returns (planner.files), and nothing
    registers exit handlers; mypy's command ends the same way (mypy.util.hard_exit)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away while the last output was flushed
        _quiet_stdout()
        code = code or 141
    except (OSError, ValueError, AttributeError):  # a closed or replaced stream: nothing left to write
        pass
    os._exit(code)
