"""Shared pieces of the specs: the strict base class, a value that carries its source, and the
bounded number types every spec field uses.

Every number is checked once, where it enters: floats are finite (``allow_inf_nan=False`` on the
base class, so NaN and Infinity from YAML or JSON are errors), a boolean is never taken for a
number (``gpus: true`` is an error, not 1), and each kind of quantity has a range that holds every
real system with room to spare while keeping products of them inside int64 and the search's
CP-SAT tables. The bounds, and why each is where it is:
"""

from __future__ import annotations

import types
import typing
from functools import cached_property
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

MAX_GPUS = 2**20
"""1,048,576 GPUs: the largest training clusters built hold about 10^5 GPUs; 2^20 is ten times
that, and keeps GPU counts times bytes per GPU far inside int64."""
MAX_INT = 2**31 - 1
"""Any other count (widths, heads, experts, a calibration's GEMM dimensions)."""
MAX_LAYERS = 256
"""Decoder layers: twice the deepest published models (Megatron 1T: 128, Llama 3.1 405B: 126). The
search's work grows with layers x pipeline stages x micro-batches: a 256-layer model searches about
as long as the 128-layer 1T model on 4,096 GPUs (10-20 s on two cores), 512 layers took 35 s on
1,024 GPUs and 4,096 layers minutes. It also bounds pipeline layouts."""
MAX_SEQ_LEN = 2**24
"""16,777,216 tokens per sequence: 16x the longest context models are trained at (1M)."""
MAX_GLOBAL_BATCH = 2**24
"""Sequences per optimizer step (published runs use up to 16,384)."""
MAX_TOKENS_PER_STEP = 2**36
"""Global batch x sequence length: 68.7 billion tokens, 4,000x the largest published step (16M)."""
MAX_BYTES = float(2**50)
"""1 PiB: bounds memory per GPU, host memory and margins (a GPU has at most a few hundred GiB)."""
MIN_MEMORY_BYTES = float(2**30)
"""1 GiB: a GPU or host with less memory is a typo (GiB given where bytes belong)."""
MAX_FLOPS = 1e18
"""FLOP/s per GPU: 1 EFLOP/s, 200x a B200's dense FP8 peak."""
MIN_FLOPS = 1e9
"""1 GFLOP/s: slower than any accelerator (a typo, e.g. TFLOP/s given as FLOP/s / 1e12)."""
MAX_BANDWIDTH = 1e15
"""bytes/s per GPU or link: 1 PB/s, over 100x HBM3e."""
MIN_BANDWIDTH = 1e6
"""1 MB/s: below any link a cluster uses."""
MAX_LATENCY_S = 1.0
"""A link or kernel latency of a second or more is not a latency."""


def _not_bool(value):
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a boolean, not a number")
    return value


NotBool = BeforeValidator(_not_bool)
"""A boolean where a number belongs is an error (pydantic would read true as 1)."""


def _not_bool_items(value):
    if isinstance(value, (list, tuple)):
        for item in value:
            _not_bool(item)
    return value


NotBoolItems = BeforeValidator(_not_bool_items)
"""The same for a list or tuple of numbers (a GEMM shape [8192, true, 8192])."""


def _number_kind(annotation: Any) -> str | None:
    """'scalar' for int, float and their optional forms, 'items' for a list or tuple of them, None
    for anything else (a field that admits bool, a string, a model)."""
    numbers = (int, float)
    if annotation in numbers:
        return "scalar"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if bool in args:
            return None
        kinds = {_number_kind(a) for a in args if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin in (list, tuple) and args and all(a in numbers or a is Ellipsis for a in args):
        return "items"
    return None

PositiveInt = Annotated[int, NotBool, Field(gt=0, le=MAX_INT)]
NonNegInt = Annotated[int, NotBool, Field(ge=0, le=MAX_INT)]
GpuCount = Annotated[int, NotBool, Field(gt=0, le=MAX_GPUS)]
LayerCount = Annotated[int, NotBool, Field(gt=0, le=MAX_LAYERS)]
Fraction = Annotated[float, NotBool, Field(ge=0.0, le=1.0)]
Bytes = Annotated[float, NotBool, Field(ge=MIN_MEMORY_BYTES, le=MAX_BYTES)]
"""A memory size in bytes (HBM, host memory)."""
ByteMargin = Annotated[float, NotBool, Field(ge=0.0, le=MAX_BYTES)]
"""Bytes kept free or added (margins, buffers): zero is allowed."""
Flops = Annotated[float, NotBool, Field(ge=MIN_FLOPS, le=MAX_FLOPS)]
Bandwidth = Annotated[float, NotBool, Field(ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH)]
Latency = Annotated[float, NotBool, Field(gt=0.0, le=MAX_LATENCY_S)]
PositiveFloat = Annotated[float, NotBool, Field(gt=0.0, le=1e30)]
"""Any other positive quantity (parameter and token counts, watts, TFLOP/s)."""
NonNegativeFloat = Annotated[float, NotBool, Field(ge=0.0, le=1e30)]

def ascii_number(text: str, kind: type[int] | type[float] = int) -> int | float:
    """``int(text)`` or ``float(text)`` of text written in ASCII: Python's int() and float() also
    read other scripts' digits ('２', fullwidth; '٢', Arabic-Indic) as numbers, which Hydra's and
    OmegaConf's override grammar (INT: [0-9] only) and YAML's number forms do not; every text
    reader takes numbers through here. Raises ValueError otherwise."""
    if not str(text).isascii():
        raise ValueError(f"{text!r} is not a number written in ASCII digits")
    return kind(text)


def is_ascii_count(text: str) -> bool:
    """Whether ``text`` is a whole number of ASCII digits (str.isdigit() also takes '２' and '²')."""
    return text.isascii() and text.isdigit()


T = TypeVar("T")


class Spec(BaseModel):
    """Base of every spec: unknown keys are errors, specs are immutable. A field's docstring (the
    string literal under it) documents it in the source; pydantic's ``use_attribute_docstrings``
    would copy it into the field's description, but nothing reads those and parsing every spec
    class's source for them cost about 0.13 s of each command's start-up."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Every number field of every spec refuses a boolean, whether or not its type names
        NotBool: a plain ``gpus: int | None = Field(None, gt=0)`` (the runs file's) read
        ``gpus: true`` as 1 GPU. Added once per class, when it is built."""
        super().__pydantic_init_subclass__(**kwargs)
        changed = False
        for field in cls.model_fields.values():
            kind = _number_kind(field.annotation)
            guard = NotBool if kind == "scalar" else NotBoolItems if kind == "items" else None
            if guard is not None and not any(m is NotBool or m is NotBoolItems for m in field.metadata):
                field.metadata.append(guard)
                changed = True
        if changed:
            cls.model_rebuild(force=True)

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
