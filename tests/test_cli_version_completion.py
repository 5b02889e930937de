"""`planner --version` and shell completion (`planner completion SHELL` prints the script; the
shell then calls planner with _PLANNER_COMPLETE set)."""

from __future__ import annotations

import os
import subprocess
import sys

from planner import __version__
from planner.cli import main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"planner {__version__}"


def test_completion_scripts(capsys):
    for shell, marker in (("bash", "complete -o"), ("zsh", "compdef"), ("fish", "complete --command planner")):
        assert main(["completion", shell]) == 0
        out = capsys.readouterr().out
        assert "_PLANNER_COMPLETE" in out and marker in out, shell


def test_completion_unknown_shell(capsys):
    assert main(["completion", "tcsh"]) == 2
    assert "knows no shell 'tcsh'" in capsys.readouterr().err


def _complete(words: str, cword: int) -> str:
    env = {**os.environ, "_PLANNER_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    proc = subprocess.run([sys.executable, "-c", "import sys; from planner.cli import main; sys.exit(main())"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_completion_answers_commands_and_options():
    assert "search" in _complete("planner sea", 1).split()
    assert "--format" in _complete("planner export --for", 2).split()
