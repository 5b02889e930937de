"""The model a Megatron command line describes: its architecture flags as ModelSpec-shaped hints,
the catalog model they match, or a model built from them.

Facts from megatron-core 0.19.2 (megatron/training/arguments.py, megatron/core/transformer/):

- ``--disable-bias-linear`` clears ``add_bias_linear``, which is on by default and puts biases on
  every linear layer: the QKV projection gets one when ``add_bias_linear or add_qkv_bias``
  (attention.py), the output projection, the MLP and the experts when ``add_bias_linear``;
- ``--mtp-num-layers`` absent means no MTP module (``mtp_num_layers`` defaults to None);
- ``--moe-layer-freq`` is an int or a Python list expression that ``_eval_pattern`` checks for the
  characters ``,0-9[]()+*`` and then ``eval()``s; planner evaluates the same expressions with
  bounded integers and lists instead (a count above the layer count is refused);
- without ``--vocab-size`` the vocabulary is the tokenizer's (``len(tokenizer)`` for
  HuggingFaceTokenizer, the vocab.json entries for GPT2BPETokenizer).

A flag the command line leaves out reads as the framework's default (core_v0.19.0), each where it
is set: ``--normalization`` LayerNorm, ``--hidden-dropout`` / ``--attention-dropout`` 0.1
(TransformerConfig's fields, which ArgumentGroupFactory turns into flags with those defaults);
``--position-embedding-type`` learned_absolute, tied embeddings unless
``--untie-embeddings-and-output-weights``, ``--rotary-base`` 10000, ``--rotary-percent`` 1.0,
``--rope-scaling-factor`` 8.0, ``--rotary-scaling-factor`` 1.0 (arguments.py
_add_network_size_args, _add_mla_args); ``--kv-lora-rank`` 32, ``--qk-head-dim`` 128,
``--qk-pos-emb-head-dim`` 64, ``--v-head-dim`` 128 (_add_mla_args); ``--ffn-hidden-size``
4 x hidden, or int(8 x hidden / 3 / 64) x 64 with ``--swiglu`` (validate_args).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.specs.catalog import all_models, validate_spec
from planner.specs.common import ascii_number
from planner.specs.model import ModelSpec
from planner.specs.overrides import describe, merge

MAX_TOKENIZER_BYTES = 64 << 20


def int_value(flag: str, value, default=None):
    """An integer flag value; a clear error naming the flag (and the unresolved variable)."""
    if value is None or value is True:
        return default
    try:
        return int(ascii_number(value)) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        pass
    text = str(value)
    if "$" in text or "`" in text:
        raise PlannerError(
            f"{flag} is {text}, which the script leaves to its environment or arguments (planner does not run "
            "anything to find out).",
            hint="Give the value: pass the script's environment with --script-env NAME=VALUE and its arguments "
            "with --script-args, or edit the script.",
        )
    raise PlannerError(f"{flag} {text}: Megatron expects an integer there.")


def flag_int(values: dict, dest: str, default=None):
    """The integer value of the flag whose argparse dest is ``dest`` (see int_value)."""
    return int_value("--" + dest.replace("_", "-"), values.get(dest), default)


# ---------------------------------------------------------------------------------------------
# --moe-layer-freq: Python list expressions, evaluated with bounds
# ---------------------------------------------------------------------------------------------

_PATTERN_CHARS = set(",0123456789[]()+*")
_MAX_PATTERN_CHARS = 10_000
_MAX_INT = 10**9


class _ListExpr:
    """The grammar Megatron's eval() sees in a --moe-layer-freq pattern: integers, [lists],
    (parentheses), subscripts, +, * and ** with Python's precedence. Every list is bounded by the
    layer count and every integer by 1e9; nothing is evaluated beyond that."""

    def __init__(self, text: str, limit: int, original: str):
        self.s = text
        self.i = 0
        self.limit = limit
        self.original = original
        self.depth = 0

    def fail(self, why: str) -> PlannerError:
        return PlannerError(f"--moe-layer-freq {self.original!r}: {why}.",
                            hint="Give an int (every k-th layer MoE) or a list such as '([0]*3+[1]*58)' with one "
                            "entry per layer.")

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def parse(self):
        v = self.expr()
        if self.i != len(self.s):
            raise self.fail(f"unexpected '{self.s[self.i]}' at character {self.i + 1}")
        return v

    def expr(self):
        v = self.term()
        while self.peek() == "+":
            self.i += 1
            v = self.add(v, self.term())
        return v

    def term(self):
        v = self.power()
        while self.peek() == "*" and not self.s.startswith("**", self.i):
            self.i += 1
            v = self.mul(v, self.power())
        return v

    def power(self):
        base = self.postfix()
        if self.s.startswith("**", self.i):
            self.i += 2
            self.enter()
            try:
                exp = self.power()  # right-associative, as in Python
            finally:
                self.depth -= 1
            if not isinstance(base, int) or not isinstance(exp, int):
                raise self.fail("'**' needs two integers")
            if exp < 0:
                raise self.fail("a negative exponent gives a float, not a count")
            if abs(base) > 1 and exp > 64:
                raise self.fail(f"{base}**{exp} is far beyond any layer count")
            return self.int(base**exp)
        return base

    def postfix(self):
        v = self.atom()
        while self.peek() == "[":
            self.i += 1
            self.enter()
            try:
                k = self.expr()
            finally:
                self.depth -= 1
            if self.peek() != "]":
                raise self.fail("a '[' subscript is never closed")
            self.i += 1
            if not isinstance(v, list) or not isinstance(k, int):
                raise self.fail("only a list can be subscripted, with an integer")
            if not -len(v) <= k < len(v):
                raise self.fail(f"index {k} is out of range for a list of {len(v)}")
            v = v[k]
        return v

    def atom(self):
        c = self.peek()
        if c.isdigit():
            j = self.i
            while j < len(self.s) and self.s[j].isdigit():
                j += 1
            if j - self.i > 10:
                raise self.fail("an integer with more than 10 digits")
            text = self.s[self.i:j]
            self.i = j
            return self.int(int(text))
        if c in "([":
            close = ")" if c == "(" else "]"
            self.i += 1
            self.enter()
            try:
                items, comma = [], False
                while self.peek() != close:
                    items.append(self.expr())
                    if self.peek() == ",":
                        self.i += 1
                        comma = True
                    elif self.peek() != close:
                        raise self.fail(f"expected ',' or '{close}' at character {self.i + 1}")
            finally:
                self.depth -= 1
            self.i += 1
            if close == ")":
                if comma or not items:
                    raise self.fail("a tuple: Megatron needs a list")
                return items[0]
            return self.list(items)
        raise self.fail(f"unexpected {'end' if not c else repr(c)} at character {self.i + 1}")

    def enter(self):
        self.depth += 1
        if self.depth > 50:
            raise self.fail("nested more than 50 levels")

    def int(self, v: int) -> int:
        if abs(v) > _MAX_INT:
            raise self.fail(f"the integer {v} is far beyond any layer count")
        return v

    def list(self, items: list) -> list:
        if len(items) > self.limit:
            raise self.fail(f"the list would hold more than the {self.limit} layers")
        return items

    def add(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return self.int(a + b)
        if isinstance(a, list) and isinstance(b, list):
            return self.list(a + b)
        raise self.fail("'+' joins two lists or adds two integers")

    def mul(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return self.int(a * b)
        lst, n = (a, b) if isinstance(a, list) else (b, a)
        if not isinstance(lst, list) or not isinstance(n, int):
            raise self.fail("'*' repeats a list by an integer")
        if n > self.limit:
            raise self.fail(f"a repeat count of {n} is above the {self.limit} layers")
        return self.list(lst * max(n, 0))


def parse_moe_layer_freq(text: str, num_layers: int | None) -> int | list[int]:
    """--moe-layer-freq as Megatron's moe_freq_type reads it: an int, or (when the text holds a
    '[') a list with one 0/1 entry per decoder layer."""
    t = text.strip()
    if "[" not in t:
        return int_value("--moe-layer-freq", t)
    if len(t) > _MAX_PATTERN_CHARS:
        raise PlannerError(f"--moe-layer-freq is {len(t):,} characters long; planner reads patterns up to "
                           f"{_MAX_PATTERN_CHARS:,}.")
    limit = num_layers if num_layers else 10_000
    value = _ListExpr("".join(t.split()), limit, t).parse()
    if isinstance(value, int):
        return value
    flat = value
    if any(not isinstance(x, int) or x not in (0, 1) for x in flat):
        raise PlannerError(f"--moe-layer-freq {t!r}: every entry must be 0 (dense) or 1 (MoE).")
    if num_layers and len(flat) != num_layers:
        raise PlannerError(
            f"--moe-layer-freq {t!r} gives {len(flat)} entries for {num_layers} layers; Megatron needs one per "
            "layer (gpt_layer_specs.py asserts it).")
    return flat


def pattern_has_foreign_chars(text: str) -> bool:
    """Whether Megatron's _eval_pattern would refuse the text (characters beyond ,0-9[]()+*)."""
    return "[" in text and any(c not in _PATTERN_CHARS for c in text)


# ---------------------------------------------------------------------------------------------
# hints
# ---------------------------------------------------------------------------------------------


def _float_flag(v: dict, dest: str, default: float | None = None) -> float | None:
    """A float flag value (argparse type=float), the default when absent; a clear error naming the flag."""
    value = v.get(dest)
    if value is None or value is True:
        return default
    try:
        return float(ascii_number(value, float)) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        pass
    int_value("--" + dest.replace("_", "-"), value)  # an unresolved $VAR: the error that names it
    raise PlannerError(f"--{dest.replace('_', '-')} {value}: Megatron expects a number there.")


# Megatron's fixed Llama 3 RoPE bands: RotaryEmbedding._apply_scaling (megatron/core/models/common/
# embeddings/rotary_pos_embedding.py, core_v0.19.0) is called with the factor alone, its other
# arguments keep these defaults.
_LLAMA3_BANDS = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def rope_hints(v: dict, mla: bool) -> dict | None:
    """The RoPE the flags build (a RoPE-shaped dict), or None without rotary embeddings.

    - GQA: ``--position-embedding-type rope`` (``--use-rotary-position-embeddings`` is its
      deprecated spelling, validate_args) with ``--use-rope-scaling`` for Llama 3's bands or
      ``--rotary-seq-len-interpolation-factor`` for linear interpolation; ``yarn`` takes the
      YaRN values _apply_yarn_config_from_args (megatron/training/argument_utils.py) sets:
      ``--rotary-scaling-factor`` (1.0), ``--yarn-original-max-position-embeddings`` (4096),
      ``--yarn-beta-fast`` (32), ``--yarn-beta-slow`` (1), rounding of the correction range
      (True unless ``--no-yarn-correction-range-round-to-int``).
    - MLA rotates inside the attention by ``--rope-type``: absent, core_transformer_config_from_args
      pops it and MLATransformerConfig's default 'yarn' stands, with its fixed 4096 original
      positions and betas 32 / 1 (no flag sets them) and the flag's ``--rotary-scaling-factor``.
    - ``--mscale`` / ``--mscale-all-dim`` left out read as None: Megatron's defaults (1.0, 0.0)
      give YaRN's attention scale 0.1 ln(factor) + 1 (_yarn_get_mscale), the scale a config.json
      without them means; given, they are kept as written.
    """
    pe = v.get("position_embedding_type") or ("rope" if v.get("use_rotary_position_embeddings") else
                                              "learned_absolute")
    if not mla and pe not in ("rope", "yarn"):
        return None
    r: dict[str, Any] = {"theta": float(int_value("--rotary-base", v.get("rotary_base"), 10000)),
                         "percent": _float_flag(v, "rotary_percent", 1.0)}
    mscales = {k: _float_flag(v, k) for k in ("mscale", "mscale_all_dim") if v.get(k) is not None}
    if mla:
        if (v.get("rope_type") or "yarn") == "yarn":
            r.update(scaling="yarn", factor=_float_flag(v, "rotary_scaling_factor", 1.0),
                     original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0, **mscales)
        return r
    if pe == "yarn":
        r.update(scaling="yarn", factor=_float_flag(v, "rotary_scaling_factor", 1.0),
                 original_max_position_embeddings=int_value("--yarn-original-max-position-embeddings",
                                                            v.get("yarn_original_max_position_embeddings"), 4096),
                 beta_fast=_float_flag(v, "yarn_beta_fast", 32.0), beta_slow=_float_flag(v, "yarn_beta_slow", 1.0),
                 truncate=v.get("yarn_correction_range_round_to_int") is not False, **mscales)
    elif v.get("use_rope_scaling"):
        r.update(scaling="llama3", factor=_float_flag(v, "rope_scaling_factor", 8.0), **_LLAMA3_BANDS)
    elif v.get("rotary_seq_len_interpolation_factor") is not None:
        r.update(scaling="linear", factor=float(int_value("--rotary-seq-len-interpolation-factor",
                                                          v["rotary_seq_len_interpolation_factor"])))
    return r


def _activation(v: dict) -> tuple[str, float | None]:
    """(planner's activation, clamp) of the MLP flags (core_transformer_config_from_args):
    ``--swiglu`` SiLU-gated; ``--quick-geglu`` the quick-GELU-gated unit, which with
    ``--glu-linear-offset 1`` and ``--activation-func-clamp-value`` is gpt-oss's clamped unit
    (Megatron-Bridge's GPTOSSProvider sets exactly these three), planner's 'swiglu' with a clamp
    as config.json's hidden_act silu names it; else GELU (2 matrices; --squared-relu too)."""
    clamp = _float_flag(v, "activation_func_clamp_value")
    if v.get("swiglu"):
        return "swiglu", clamp  # mlp.py's glu() clamps the unfused unit
    if v.get("quick_geglu"):
        gpt_oss = clamp is not None and _float_flag(v, "glu_linear_offset", 0.0) == 1.0
        return ("swiglu" if gpt_oss else "geglu"), clamp
    return "gelu", None  # the clamp applies to gated units only (mlp.py glu())


def model_hints(v: dict) -> dict:
    """ModelSpec-shaped facts the flags state (argparse dest -> value, as parse_megatron_argv
    gives them). An architecture flag the command line leaves out reads as Megatron's default (the
    module docstring lists each with its source); the size flags Megatron requires (layers, hidden
    size, heads) and the vocabulary are absent when absent. Each part reads its flags in turn, so a
    bad value is reported for the same flag whichever parts follow."""
    h = _size_hints(v)
    bias = v.get("add_bias_linear", True) is not False  # --disable-bias-linear clears Megatron's default
    heads = int_value("--num-attention-heads", v.get("num_attention_heads"))
    hidden = int_value("--hidden-size", v.get("hidden_size"))
    attention = _attention_hints(v, heads, hidden, bias, h.get("num_layers"))
    if attention is not None:
        h["attention"] = attention
    h["ffn"], ffn = _ffn_hints(v, hidden, bias)
    if v.get("num_experts"):
        h["moe"] = _moe_hints(v, ffn, bias, h.get("num_layers"))
        if h["moe"].get("first_k_dense", 0) == 0 and "layer_pattern" not in h["moe"] and "layer_freq" not in h["moe"]:
            h["ffn"]["bias"] = False  # no dense MLP to carry the bias: the spec's default
    return h


def _size_hints(v: dict) -> dict[str, Any]:
    """Sizes, MTP, tied embeddings, norm, positions and dropouts the flags state
    (arguments.py _add_network_size_args, TransformerConfig defaults)."""
    h: dict[str, Any] = {}
    for dest, key in (("num_layers", "num_layers"), ("hidden_size", "hidden_size"), ("vocab_size", "vocab_size"),
                      ("max_position_embeddings", "max_position_embeddings")):
        if v.get(dest) is not None:
            h[key] = int_value("--" + dest.replace("_", "-"), v[dest])
    if "vocab_size" not in h and v.get("padded_vocab_size") is not None:
        # --padded-vocab-size is the embedding's row count (argument_utils.py passes it as vocab_size)
        h["vocab_size"] = int_value("--padded-vocab-size", v["padded_vocab_size"])
    h["mtp_layers"] = int_value("--mtp-num-layers", v.get("mtp_num_layers"), 0) or 0
    # --untie-embeddings-and-output-weights is a store_true switch: without it the output layer
    # shares the embedding (arguments.py _add_network_size_args).
    h["tie_embeddings"] = not v.get("untie_embeddings_and_output_weights", False)
    # TransformerConfig.normalization defaults to "LayerNorm"; the flag's default is that field's.
    h["norm"] = "rmsnorm" if (v.get("normalization") or "LayerNorm") == "RMSNorm" else "layernorm"
    rope = rope_hints(v, bool(v.get("multi_latent_attention")))
    h["position_embedding"] = "rope" if rope is not None else "learned"
    if rope is not None:
        h["rope"] = rope
    for dest in ("attention_dropout", "hidden_dropout"):
        h[dest] = _float_flag(v, dest, 0.1)  # TransformerConfig: hidden_dropout = attention_dropout = 0.1
    return h


def _attention_hints(v: dict, heads: int | None, hidden: int | None, bias: bool,
                     num_layers: int | None) -> dict[str, Any] | None:
    """The attention the flags state: MLA with MLATransformerConfig's defaults, else GQA/MHA
    (--num-query-groups only with --group-query-attention, head dim --kv-channels or hidden/heads);
    None without --multi-latent-attention or a head count."""
    if v.get("multi_latent_attention"):
        return {k: val for k, val in dict(
            kind="mla", num_heads=heads, q_lora_rank=int_value("--q-lora-rank", v.get("q_lora_rank")),
            kv_lora_rank=int_value("--kv-lora-rank", v.get("kv_lora_rank"), 32),
            qk_nope_head_dim=int_value("--qk-head-dim", v.get("qk_head_dim"), 128),
            qk_rope_head_dim=int_value("--qk-pos-emb-head-dim", v.get("qk_pos_emb_head_dim"), 64),
            v_head_dim=int_value("--v-head-dim", v.get("v_head_dim"), 128)).items() if val is not None or k == "q_lora_rank"}
    if not heads:
        return None
    kv = int_value("--num-query-groups", v.get("num_query_groups"), 1) if v.get("group_query_attention") else heads
    hd = int_value("--kv-channels", v.get("kv_channels")) or (hidden // heads if hidden else None)
    attention = {k: val for k, val in dict(
        kind="gqa", num_heads=heads, num_kv_heads=kv, head_dim=hd, qk_norm=bool(v.get("qk_layernorm")),
        qkv_bias=bias or bool(v.get("add_qkv_bias")), output_bias=bias).items() if val is not None}
    attention.update(_local_attention_hints(v, num_layers))
    return attention


def _ffn_hints(v: dict, hidden: int | None, bias: bool) -> tuple[dict[str, Any], int | None]:
    """(the ffn hints, the FFN width) the flags state; the width without --ffn-hidden-size as
    validate_args sets it."""
    activation, clamp = _activation(v)
    ffn = int_value("--ffn-hidden-size", v.get("ffn_hidden_size"))
    if ffn is None and hidden:
        # validate_args: 4 x hidden, or with --swiglu (only that switch) 8/3 x hidden rounded down to 64
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if v.get("swiglu") else 4 * hidden
    hints: dict[str, Any] = {"activation": activation, "bias": bias}
    if clamp is not None:
        hints["clamp"] = clamp
    if ffn:
        hints["hidden_size"] = ffn
    return hints, ffn


def _moe_hints(v: dict, ffn: int | None, bias: bool, num_layers: int | None) -> dict[str, Any]:
    """The MoE the flags state (--num-experts given): experts, shared experts, which layers are
    MoE (--moe-layer-freq) and the router."""
    # TopKRouter gives its gating linear a bias whenever add_bias_linear is on
    # (megatron/core/transformer/moe/router.py, core_v0.19.0).
    moe: dict[str, Any] = {"num_experts": int_value("--num-experts", v["num_experts"]),
                           "top_k": int_value("--moe-router-topk", v.get("moe_router_topk"), 2),
                           "expert_hidden_size": int_value("--moe-ffn-hidden-size", v.get("moe_ffn_hidden_size")) or ffn,
                           "expert_bias": bias, "router_linear_bias": bias}
    shared = int_value("--moe-shared-expert-intermediate-size", v.get("moe_shared_expert_intermediate_size"))
    if shared:
        # Megatron builds one shared MLP of this width; planner counts it as n experts of the
        # routed width where it divides (the width then follows from the count).
        width = moe["expert_hidden_size"]
        if width and shared % width == 0:
            moe["num_shared_experts"] = shared // width
        else:
            moe["num_shared_experts"] = 1
            moe["shared_expert_hidden_size"] = shared
    moe.update(_moe_layer_hints(v, num_layers))
    moe.update(_router_hints(v))
    return moe


def _moe_layer_hints(v: dict, num_layers: int | None) -> dict[str, Any]:
    """Which layers are MoE, from --moe-layer-freq (arguments.py _eval_pattern): first_k_dense,
    a per-layer pattern, or every n-th layer."""
    freq = parse_moe_layer_freq(str(v.get("moe_layer_freq", "1")), num_layers)
    if isinstance(freq, list):
        first_dense = next((i for i, x in enumerate(freq) if x), len(freq))
        rest = freq[first_dense:]
        if rest and not all(rest):
            return {"layer_pattern": freq}  # not first_k_dense + all MoE: every layer's kind (Llama 4 Maverick)
        return {"first_k_dense": first_dense}
    return {"layer_freq": freq} if freq > 1 else {}


def _router_hints(v: dict) -> dict[str, Any]:
    """The router's score function, expert bias, groups and scaling the --moe-router-* flags state."""
    moe: dict[str, Any] = {}
    if v.get("moe_router_score_function"):
        moe["score_function"] = v["moe_router_score_function"]
    if v.get("moe_router_enable_expert_bias"):
        moe["router_bias"] = True
    if v.get("moe_router_num_groups"):
        moe["num_groups"] = int_value("--moe-router-num-groups", v["moe_router_num_groups"])
    if v.get("moe_router_group_topk"):
        moe["group_top_k"] = int_value("--moe-router-group-topk", v["moe_router_group_topk"])
    if v.get("moe_router_topk_scaling_factor") is not None:
        f = _float_flag(v, "moe_router_topk_scaling_factor")
        if f is not None and f > 0 and f != 1.0:
            moe["routed_scaling_factor"] = f
    return moe


def _local_attention_hints(v: dict, num_layers: int | None) -> dict:
    """Sliding windows, no-RoPE layers, L2 QK norm and learned sinks as the flags give them:
    --window-size 'L,R' (a query attends L earlier keys: config.json's window W = L + 1), which
    layers slide (--window-attn-skip-freq N: SWA iff layer_number % N != 0; a list: 1 = SWA),
    --no-rope-freq N (RoPE skipped on every N-th layer), --qk-l2-norm, --softmax-type learnable."""
    out: dict[str, Any] = {}
    if v.get("qk_l2_norm"):
        out["qk_l2_norm"] = True
    if v.get("softmax_type") == "learnable":
        out["sinks"] = True
    size = v.get("window_size")
    if size:
        parts = str(size).strip("()").split(",")
        left = int_value("--window-size", parts[0].strip())
        if left is not None and left >= 0:
            out["sliding_window"] = left + 1
            freq = v.get("window_attn_skip_freq")
            if freq is not None:
                flags = parse_moe_layer_freq(str(freq), num_layers)
                if isinstance(flags, int):
                    if flags == 2:
                        out["sliding_window_every"] = 2
                    elif flags > 1:
                        out["global_every"] = flags
                elif num_layers:
                    n = flags.index(0) + 1 if 0 in flags else None
                    if n and flags == [1 if (i + 1) % n else 0 for i in range(num_layers)]:
                        out["global_every"] = n
                    elif flags == [1 if i % 2 == 0 else 0 for i in range(num_layers)]:
                        out["sliding_window_every"] = 2
    nope = v.get("no_rope_freq")
    if nope is not None and "[" not in str(nope):
        n = int_value("--no-rope-freq", nope)
        if n and n > 1:
            out["no_rope_every"] = n
    return out


_COMPARED = ("num_layers", "hidden_size", "vocab_size", "mtp_layers", "tie_embeddings", "norm", "position_embedding")


def hint_mismatches(model, hints: dict) -> list[str]:
    """Where the flags disagree with a catalog model (each 'field: flags say X, model has Y')."""
    out = []
    for key in _COMPARED:
        if key in hints and getattr(model, key) != hints[key]:
            out.append(f"{key}: flags say {hints[key]}, {model.name} has {getattr(model, key)}")
    a = hints.get("attention") or {}
    if a.get("kind") and a["kind"] != model.attention.kind:
        out.append(f"attention.kind: flags say {a['kind']}, {model.name} has {model.attention.kind}")
    else:
        for key, val in a.items():
            have = getattr(model.attention, key, None)
            if have is not None and have != val and not (key == "q_lora_rank" and val is None and have is None):
                out.append(f"attention.{key}: flags say {val}, {model.name} has {have}")
    f = hints.get("ffn") or {}
    if "hidden_size" in f and any(k == "dense" for k in model.layer_kinds) and f["hidden_size"] != model.ffn.hidden_size:
        out.append(f"ffn.hidden_size: flags say {f['hidden_size']}, {model.name} has {model.ffn.hidden_size}")
    if f.get("activation") and f["activation"] != model.ffn.activation:
        out.append(f"ffn.activation: flags say {f['activation']}, {model.name} has {model.ffn.activation}")
    if "bias" in f and any(k == "dense" for k in model.layer_kinds) and f["bias"] != model.ffn.bias:
        out.append(f"ffn.bias: flags say {f['bias']}, {model.name} has {model.ffn.bias}")
    m = hints.get("moe")
    if bool(m) != model.is_moe:
        out.append(f"moe: flags say {'MoE' if m else 'dense'}, {model.name} is {'MoE' if model.is_moe else 'dense'}")
    elif m:
        if "layer_pattern" in m and [int(k == "moe") for k in model.layer_kinds] != list(m["layer_pattern"]):
            out.append(f"moe layers: flags say {m['layer_pattern']}, {model.name} has "
                       f"{[int(k == 'moe') for k in model.layer_kinds]}")
        for key in ("num_experts", "top_k", "expert_hidden_size", "first_k_dense", "shared_expert_hidden_size",
                    "expert_bias"):
            have = model.moe.shared_hidden if key == "shared_expert_hidden_size" else getattr(model.moe, key)
            if key in m and m[key] != have:
                out.append(f"moe.{key}: flags say {m[key]}, {model.name} has {have}")
    return out


def match_catalog_model(hints: dict):
    """(model, note) for the catalog model the flags describe, or None.

    A model that differs only in the MTP depth is the same architecture trained with another
    number of MTP modules (a training choice, as the DeepSeek-V3 GB200 guide runs V3 without
    MTP): it matches, with the flags' MTP depth."""
    models = all_models()
    for model in models:
        if not hint_mismatches(model, hints):
            return model, None
    if "mtp_layers" in hints:
        rest = {k: v for k, v in hints.items() if k != "mtp_layers"}
        for model in models:
            if not hint_mismatches(model, rest):
                n = hints["mtp_layers"]
                data = model.model_dump()
                data.update(name=f"{model.name}-mtp{n}", aliases=[], mtp_layers=n)
                variant = type(model).model_validate(data)
                return variant, (f"{model.name} with the script's MTP depth: {n} MTP layer(s) where the catalog "
                                 f"model has {model.mtp_layers}")
    return None


# ---------------------------------------------------------------------------------------------
# vocabulary
# ---------------------------------------------------------------------------------------------


def _read_small_json(path: Path):
    """A JSON file's content when it is a regular, readable file under 64 MiB; else None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_TOKENIZER_BYTES:
        return None
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read(MAX_TOKENIZER_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return None


def vocab_from_tokenizer(path_text: str) -> tuple[int, str] | None:
    """(vocabulary size, where it was read) from a local tokenizer: a HuggingFace tokenizer.json
    (model vocab plus added tokens, as len(tokenizer) counts them), a GPT-2 vocab.json, or a
    model folder holding either (or a config.json with vocab_size). None when unreadable."""
    if not path_text or "$" in path_text or "`" in path_text:
        return None
    p = Path(path_text)
    candidates = [p]
    try:
        if p.is_dir():
            candidates = [p / "tokenizer.json", p / "vocab.json", p / "config.json"]
    except (OSError, ValueError):
        return None
    for c in candidates:
        data = _read_small_json(c)
        if not isinstance(data, dict):
            continue
        model = data.get("model")
        if isinstance(model, dict) and "vocab" in model:
            vocab = model["vocab"]
            ids: set[int] = set()
            if isinstance(vocab, dict):
                ids = {v for v in vocab.values() if isinstance(v, int)}
            elif isinstance(vocab, list):
                ids = set(range(len(vocab)))
            for tok in data.get("added_tokens") or []:
                if isinstance(tok, dict) and isinstance(tok.get("id"), int):
                    ids.add(tok["id"])
            if ids:
                return len(ids), str(c)
        if c.name == "config.json" and isinstance(data.get("vocab_size"), int) and data["vocab_size"] > 0:
            return data["vocab_size"], str(c)
        if c.name != "config.json" and data and all(isinstance(x, int) for x in list(data.values())[:100]):
            return len(data), str(c)  # vocab.json: token -> id
    return None


def model_from_hints(hints: dict, name: str = "megatron-args", *, tokenizer: str | None = None,
                     overrides: dict | None = None):
    """A ModelSpec built from the flags alone (when no catalog model matches). ``overrides`` sets
    model fields the flags cannot give (vocab_size); ``tokenizer`` is the --tokenizer-model or
    --vocab-file value, read for the vocabulary when --vocab-size is absent."""
    data = {k: v for k, v in hints.items() if k not in ("attention", "ffn", "moe")}
    data.update(name=name, source=["Megatron-LM command-line flags"])
    top = {k: v for k, v in (overrides or {}).items() if k not in ("attention", "ffn", "moe")}
    data = merge(data, top)
    if "vocab_size" not in data:
        found = vocab_from_tokenizer(tokenizer) if tokenizer else None
        if found is None:
            said = f" names its tokenizer ({tokenizer})" if tokenizer else " gives no tokenizer"
            raise PlannerError(
                f"The script{said} but not --vocab-size, and no catalog model matches its flags, so planner does "
                "not know the vocabulary" + (" (the tokenizer is not a local tokenizer.json, vocab.json or model "
                                             "folder planner can read)." if tokenizer else "."),
                hint="Give the vocabulary: --set vocab_size=N, or --model NAME|FILE with a model that has it.",
            )
        data["vocab_size"], where = found
        data["source"] = [*data["source"], f"vocabulary from {where}"]
    data["attention"] = dict(hints.get("attention") or {})
    if data["attention"].get("kind") == "mla":
        data["attention"].pop("output_bias", None)
    data["ffn"] = dict(hints.get("ffn") or {})
    if "hidden_size" not in data["ffn"] and hints.get("hidden_size"):
        data["ffn"]["hidden_size"] = 4 * hints["hidden_size"]
    if hints.get("moe"):
        data["moe"] = dict(hints["moe"])
    nested = {k: v for k, v in (overrides or {}).items() if k in ("attention", "ffn", "moe")}
    data = merge(data, nested)
    if overrides:
        data["source"] = [*data["source"], "model overrides: " + ", ".join(describe(overrides))]
    return validate_spec(ModelSpec, data, "model", "the Megatron flags")
