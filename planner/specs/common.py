"""Shared pieces of the specs: the strict base class and a value that carries its source."""

from __future__ import annotations

from functools import cached_property
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")


class Spec(BaseModel):
    """Base of every spec: unknown keys are errors, specs are immutable, and each field's
    docstring (the string literal under it) becomes its description in ``--help`` and JSON schema."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    # Specs key the cost model's caches, so they must hash even with list and dict fields.
    # Equality compares fields only (not cached properties), and the hash of the JSON form is
    # computed once per instance.
    @cached_property
    def content_hash(self) -> int:
        return hash((type(self).__name__, self.model_dump_json()))

    def __hash__(self) -> int:
        return self.content_hash

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in type(self).model_fields)


class Sourced(Spec, Generic[T]):
    """A number (or flag) with the document it comes from."""

    value: T
    """The value, in the unit the field name states (bytes, bytes/s, FLOP/s, count)."""
    source: str = Field(min_length=3)
    """Where the value comes from: a datasheet, a config.json, a paper table, or 'estimate: why'."""
    note: str | None = None
    """Caveats: conflicting sources, rounding, what the value does not include."""
