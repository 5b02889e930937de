"""User-facing errors.

Every problem a user can cause (a bad name, a malformed file, a plan the launcher would reject,
nothing fitting) is raised as a :class:`PlannerError` whose message is one paragraph saying what is
wrong and what to try. The CLI prints that paragraph and exits non-zero; it never shows a traceback
for these.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


class PlannerError(Exception):
    """An error caused by the input, with a one-paragraph explanation for the user."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        self.message = message.strip()
        self.hint = hint.strip() if hint else None
        super().__init__(self.paragraph())

    def paragraph(self) -> str:
        return f"{self.message} {self.hint}" if self.hint else self.message


@dataclass(frozen=True)
class Violation:
    """One broken rule, by name (planner.rules and each launcher's rules module list them)."""

    rule: str
    message: str
    hint: str | None = None

    def error(self) -> PlanRuleError:
        return PlanRuleError(self.rule, self.message, hint=self.hint)


class PlanRuleError(PlannerError):
    """A plan breaks a validity rule (a launcher's startup check or the model's shape)."""

    def __init__(self, rule: str, message: str, *, hint: str | None = None):
        self.rule = rule
        super().__init__(f"[{rule}] {message}", hint=hint)


class NothingFitsError(PlannerError):
    """The search found no plan within memory capacity; the message says what binds."""

    exit_code = 3

    def __init__(self, message: str, *, hint: str | None = None, details: dict | None = None):
        self.details = details or {}
        super().__init__(message, hint=hint)


EXCERPT_CHARS = 80
"""The most characters of a user's input (a plan, a layout, a name) an error quotes: enough to
recognize it, while a pathological input (1,000 nested brackets) cannot turn the one paragraph
into pages."""


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` as an error quotes it: at most ``limit`` characters, the cut marked with an
    ellipsis and the full length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def suggest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """'Did you mean ...' text for an unknown name, or the list of valid names."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(name.lower(), choices, n=n, cutoff=0.5)
    if close:
        return "Did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    return "Known names: " + ", ".join(choices) + "."
