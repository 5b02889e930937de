"""Shared pieces of the specs: the strict base class and a value that carries its source."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")


class Spec(BaseModel):
    """Base of every spec: unknown keys are errors, specs are immutable, and each field's
    docstring (the string literal under it) becomes its description in ``--help`` and JSON schema."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Sourced(Spec, Generic[T]):
    """A number (or flag) with the document it comes from."""

    value: T
    """The value, in the unit the field name states (bytes, bytes/s, FLOP/s, count)."""
    source: str = Field(min_length=3)
    """Where the value comes from: a datasheet, a config.json, a paper table, or 'estimate: why'."""
    note: str | None = None
    """Caveats: conflicting sources, rounding, what the value does not include."""
