"""ModelSpec: decoder-only transformers, dense and MoE (GQA/MHA or MLA attention).

Field names follow the HuggingFace config.json of each family where one exists (the importer in
:mod:`planner.specs.hf_import` maps them); parameter counting lives in :mod:`planner.specs.params`.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from planner.specs.common import (
    MAX_GLOBAL_BATCH, MAX_LAYERS, MAX_SEQ_LEN, GpuCount, LayerCount, NotBool, PositiveFloat, PositiveInt, Sourced, Spec,
)
from planner.specs.params import count_params

Width = Annotated[int, NotBool, Field(gt=0, le=2**20)]
"""A width (hidden, FFN, head or low-rank dimension): at most 2^20, 40x the widest model built."""
HeadCount = Annotated[int, NotBool, Field(gt=0, le=2**16)]
"""Attention heads or experts: at most 65,536 (published models have up to 384 experts)."""


def _printable(value: str) -> str:
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127 or c in "\u2028\u2029\x85"), None)
    if bad is not None:
        raise ValueError(f"contains the control character {bad!r}; names are one line of printable text")
    return value


Name = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_printable)]
"""A catalog name, alias or display name: one line of printable text (it appears in tables and in
the comments of exported launch scripts)."""


class GQAAttention(Spec):
    """Multi-head attention with grouped key/value heads (MHA when kv heads == heads)."""

    kind: Literal["gqa"] = "gqa"
    """Discriminator: grouped-query (or multi-head) attention."""
    num_heads: HeadCount
    """Query heads (config.json num_attention_heads)."""
    num_kv_heads: HeadCount
    """Key/value heads (num_key_value_heads); equal to num_heads for MHA."""
    head_dim: Width
    """Per-head width (head_dim, or hidden_size / num_heads where the config omits it)."""
    qk_norm: bool = False
    """RMSNorm on queries and keys per head (Qwen3); adds 2*head_dim replicated parameters."""
    qkv_bias: bool = False
    """Bias on the Q, K and V projections (GPT-3, gpt-oss)."""
    output_bias: bool = False
    """Bias on the output projection (GPT-3, gpt-oss)."""
    sinks: bool = False
    """Learned per-head attention sinks (gpt-oss): one parameter per head."""
    sliding_window: PositiveInt | None = None
    """Window of the sliding-window layers in tokens, as config.json counts it (a query attends
    the last W positions, itself included; gpt-oss: 128, Gemma 3: 1024); None when every layer is
    global."""
    sliding_window_every: PositiveInt | None = None
    """Every n-th layer (starting at layer 0) uses the sliding window; gpt-oss alternates (2)."""
    global_every: PositiveInt | None = None
    """Every N-th layer, counting from 1, attends globally and the others use the sliding window
    (Gemma 3: sliding_window_pattern 6, five local layers to one global; Megatron's
    --window-attn-skip-freq N). Excludes sliding_window_every; with neither, every layer slides."""
    attention_chunk: PositiveInt | None = None
    """Chunked local attention (Llama 4's attention_chunk_size, 8192): the layers that apply RoPE
    attend only within their chunk of this many tokens; the no-RoPE layers attend globally."""
    no_rope_every: PositiveInt | None = None
    """Every N-th layer, counting from 1, applies no rotary embedding (Llama 4's iRoPE:
    no_rope_layer_interval 4; Megatron --no-rope-freq N). No parameters; with attention_chunk it
    decides which layers attend globally. The RoPE element-wise kernel those layers skip is still
    costed (time is slightly over-estimated there)."""
    qk_l2_norm: bool = False
    """Parameter-free L2 normalization of queries and keys (Llama 4's use_qk_norm; Megatron
    --qk-l2-norm); no parameters, unlike qk_norm."""
    softmax_scale_dim: PositiveInt | None = None
    """Attention scores scaled by 1/sqrt(this) instead of 1/sqrt(head_dim) (Gemma 3's
    query_pre_attn_scalar 168); no effect on memory or time."""

    @model_validator(mode="after")
    def _kv_heads_divide(self) -> GQAAttention:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be divisible by num_kv_heads "
                f"({self.num_kv_heads}): each key/value head serves a whole group of query heads"
            )
        if self.sliding_window_every is not None and self.global_every is not None:
            raise ValueError("give sliding_window_every or global_every, not both: each says which layers slide")
        if (self.sliding_window_every is not None or self.global_every is not None) and self.sliding_window is None:
            raise ValueError("sliding_window_every and global_every need sliding_window (the window's size)")
        if self.attention_chunk is not None and self.sliding_window is not None:
            raise ValueError("a model has chunked (attention_chunk) or sliding-window (sliding_window) local "
                             "attention, not both")
        return self

    def local_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` (0-based) attends locally: a sliding window (per
        sliding_window_every or global_every) or a chunk (the RoPE layers of a chunked model)."""
        if self.attention_chunk is not None:
            return self.uses_rope(index)
        if self.sliding_window is None:
            return False
        if self.sliding_window_every is not None:
            return index % self.sliding_window_every == 0
        if self.global_every is not None:
            return (index + 1) % self.global_every != 0
        return True

    def uses_rope(self, index: int) -> bool:
        """Whether decoder layer ``index`` (0-based) applies the rotary embedding."""
        return self.no_rope_every is None or (index + 1) % self.no_rope_every != 0

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.head_dim

    @property
    def v_head_dim(self) -> int:
        return self.head_dim


class MLAAttention(Spec):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): low-rank Q and KV projections."""

    kind: Literal["mla"] = "mla"
    """Discriminator: multi-head latent attention."""
    num_heads: HeadCount
    """Attention heads (num_attention_heads)."""
    q_lora_rank: Width | None
    """Rank of the query down-projection; None means a full-rank query projection (V2-Lite)."""
    kv_lora_rank: Width
    """Rank of the compressed key/value latent."""
    qk_nope_head_dim: Width
    """Per-head query/key width without rotary embedding."""
    qk_rope_head_dim: Width
    """Per-head query/key width carrying rotary embedding (the key part is shared by all heads)."""
    v_head_dim: Width
    """Per-head value width."""

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def num_kv_heads(self) -> int:
        # After the up-projection every head has its own K and V (MLA trains like MHA).
        return self.num_heads

    def local_layer(self, index: int) -> bool:
        return False

    def uses_rope(self, index: int) -> bool:
        return True


Attention = Annotated[GQAAttention | MLAAttention, Field(discriminator="kind")]


class FFN(Spec):
    """The dense feed-forward block (also the shape of each expert, with its own width)."""

    activation: Literal["swiglu", "geglu", "gelu"]
    """swiglu: gate, up and down projections (3 matrices), SiLU-gated; geglu: the same three
    matrices GELU-gated (Gemma); gelu: up and down (2 matrices)."""
    hidden_size: Width
    """Intermediate width of the dense layers (intermediate_size / d_ff)."""
    bias: bool = False
    """Biases on the MLP projections (GPT-3)."""
    clamp: PositiveFloat | None = None
    """Limit of a clamped gated unit (gpt-oss swiglu_limit 7.0: the gate clamped from above, the
    linear half to [-limit, limit] before the activation)."""

    @property
    def gated(self) -> bool:
        """A gated linear unit (gate and up projections): SwiGLU or GeGLU."""
        return self.activation in ("swiglu", "geglu")


class MoE(Spec):
    """Mixture-of-experts layers: routed experts, optional shared experts, a router per layer."""

    num_experts: HeadCount
    """Routed experts per MoE layer (n_routed_experts / num_experts / num_local_experts)."""
    top_k: HeadCount
    """Routed experts each token is sent to (num_experts_per_tok)."""
    expert_hidden_size: Width
    """Intermediate width of one routed expert (moe_intermediate_size)."""
    num_shared_experts: Annotated[int, NotBool, Field(ge=0, le=2**16)] = 0
    """Always-active shared experts (n_shared_experts)."""
    shared_expert_hidden_size: Width | None = None
    """Total intermediate width of the shared experts; defaults to num_shared * expert_hidden_size."""
    first_k_dense: Annotated[int, NotBool, Field(ge=0, le=MAX_LAYERS)] = 0
    """The first k decoder layers use the dense FFN (first_k_dense_replace)."""
    layer_freq: LayerCount = 1
    """After the first k, layer i is MoE when i % layer_freq == 0 (DeepSeek moe_layer_freq)."""
    layer_pattern: list[Literal[0, 1]] | None = Field(None, max_length=MAX_LAYERS)
    """One entry per decoder layer, 1 = MoE, 0 = dense (Megatron's --moe-layer-freq list; Llama 4
    Maverick interleaves, MoE on every second layer from layer 1). Given, it decides alone:
    first_k_dense and layer_freq must keep their defaults."""
    routed_scaling_factor: PositiveFloat | None = None
    """The routed experts' combined output is scaled by this (DeepSeek-V3 2.5, Kimi K2 2.827,
    GLM-4.5 2.5; Megatron --moe-router-topk-scaling-factor); None: not scaled."""
    router_bias: bool = False
    """DeepSeek-V3's per-expert score-correction bias (aux-loss-free balancing, topk_method
    noaux_tc; Megatron --moe-router-enable-expert-bias, which needs sigmoid scores)."""
    router_linear_bias: bool = False
    """The router's gating linear layer has a bias, one parameter per expert (gpt-oss)."""
    expert_bias: bool = False
    """Biases inside each expert MLP (gpt-oss)."""
    score_function: Literal["softmax", "sigmoid"] = "softmax"
    """Router scoring (DeepSeek-V3 and Kimi K2 use sigmoid)."""
    num_groups: HeadCount | None = None
    """Node-limited routing groups (n_group), informational for the dispatcher."""
    group_top_k: HeadCount | None = None
    """Groups each token may use (topk_group)."""

    @model_validator(mode="after")
    def _topk_fits(self) -> MoE:
        if self.top_k > self.num_experts:
            raise ValueError(
                f"top_k ({self.top_k}) cannot exceed num_experts ({self.num_experts}): "
                "a token cannot be routed to more experts than exist"
            )
        # Group-limited routing (DeepSeek-V3's MoEGate.forward in its modeling_deepseek.py; Megatron's
        # group_limited_topk in megatron/core/transformer/moe/moe_utils.py): the experts' scores are
        # viewed as num_groups equal groups and the best group_top_k groups are kept by a topk over
        # the groups, which fails when it asks for more groups than exist or the groups are unequal.
        if self.group_top_k is not None and self.num_groups is not None and self.group_top_k > self.num_groups:
            raise ValueError(
                f"group_top_k (topk_group, {self.group_top_k}) cannot exceed num_groups (n_group, {self.num_groups}): "
                "group-limited routing keeps the best topk_group of the n_group expert groups (DeepSeek-V3's MoEGate, "
                "Megatron's group_limited_topk)"
            )
        if self.num_groups is not None and self.num_experts % self.num_groups:
            raise ValueError(
                f"num_experts ({self.num_experts}) must split into num_groups (n_group, {self.num_groups}) equal "
                "groups: group-limited routing views the experts' scores as n_group equal groups (DeepSeek-V3's "
                "MoEGate, Megatron's group_limited_topk)"
            )
        if self.layer_pattern is not None and (self.first_k_dense or self.layer_freq != 1):
            raise ValueError("layer_pattern lists every layer's kind: give it without first_k_dense and layer_freq")
        return self

    @property
    def shared_hidden(self) -> int:
        if self.shared_expert_hidden_size is not None:
            return self.shared_expert_hidden_size
        return self.num_shared_experts * self.expert_hidden_size


class RoPE(Spec):
    """Rotary position embedding: base, the rotated share of each head, and the context-extension
    scaling of config.json's rope_scaling. Changes no memory; the rotated share sets the RoPE
    kernel's work. Exported as Megatron's rotary flags."""

    theta: PositiveFloat
    """Base of the rotary frequencies (rope_theta)."""
    percent: float = Field(1.0, gt=0.0, le=1.0)
    """Share of each head's query/key width that is rotated (partial_rotary_factor; GLM-4.5: 0.5;
    Megatron --rotary-percent)."""
    scaling: Literal["none", "linear", "llama3", "yarn"] = "none"
    """rope_scaling's type: linear position interpolation (Gemma 3's global layers), Llama 3's
    frequency bands, or YaRN (DeepSeek-V3, Kimi K2, gpt-oss)."""
    factor: PositiveFloat | None = None
    """rope_scaling factor (Llama 3.1: 8, DeepSeek-V3: 40, gpt-oss: 32)."""
    original_max_position_embeddings: PositiveInt | None = None
    """The context the scaling extends (Llama 3.1: 8192, DeepSeek-V3 and gpt-oss: 4096)."""
    low_freq_factor: PositiveFloat | None = None
    """Llama 3 scaling: the low-frequency band's factor (1)."""
    high_freq_factor: PositiveFloat | None = None
    """Llama 3 scaling: the high-frequency band's factor (Llama 3.1: 4; Llama 4 Scout: 1)."""
    beta_fast: PositiveFloat | None = None
    """YaRN's fast correction boundary (32)."""
    beta_slow: PositiveFloat | None = None
    """YaRN's slow correction boundary (1)."""
    mscale: float | None = Field(None, ge=0.0, le=1e3)
    """YaRN attention-scale factor (DeepSeek-V3: 1.0); None: the scaling's default."""
    mscale_all_dim: float | None = Field(None, ge=0.0, le=1e3)
    """YaRN attention-scale factor over all dimensions (DeepSeek-V3: 1.0)."""
    truncate: bool | None = None
    """YaRN: round the correction range to whole dimensions (gpt-oss: false); None: the default (true)."""
    local_theta: PositiveFloat | None = None
    """Base of the sliding-window layers when it differs (Gemma 3's rope_local_base_freq 10000)."""

    @property
    def yarn_concentration(self) -> float:
        """YaRN's attention factor on cos and sin (Peng et al. 2023, sec. 3.4: 0.1 ln(s) + 1):
        mscale(s, mscale) / mscale(s, mscale_all_dim), or the plain factor when either is unset
        (Megatron-Core yarn_rotary_pos_embedding._yarn_get_concentration_factor; DeepSeek-V3 with
        both 1.0: 1; gpt-oss, neither set, factor 32: 1.347). 1 without YaRN."""
        if self.scaling != "yarn" or self.factor is None or self.factor <= 1.0:
            return 1.0

        factor = self.factor

        def scale(m: float) -> float:
            return 0.1 * m * math.log(factor) + 1.0

        if self.mscale is None or self.mscale_all_dim is None:
            return scale(1.0)
        return scale(self.mscale) / scale(self.mscale_all_dim)


class Published(Spec):
    """What the model's publisher states, for checking planner's own counts."""

    total_params: Sourced[PositiveFloat]
    """Published total parameters of the main model (MTP excluded), in parameters."""
    active_params: Sourced[PositiveFloat] | None = None
    """Published activated parameters per token."""
    active_convention: Literal["excl_input_embedding", "incl_embedding"] = "excl_input_embedding"
    """How the publisher counts activated parameters: with or without the input-embedding lookup
    (the output head is always counted)."""
    mtp_params: Sourced[PositiveFloat] | None = None
    """Published unique parameters of the multi-token-prediction modules."""


class ReferenceJob(Spec):
    """A published training setup used when the user names no job."""

    gpus: GpuCount
    """GPUs of the published run."""
    global_batch: Annotated[int, NotBool, Field(gt=0, le=MAX_GLOBAL_BATCH)]
    """Global batch in sequences."""
    seq_len: Annotated[int, NotBool, Field(gt=0, le=MAX_SEQ_LEN)]
    """Sequence length in tokens."""
    hardware: str | None = None
    """Catalog name of the hardware of that run, if it is in the catalog."""
    source: str
    """Paper or report that describes the run."""


class ModelSpec(Spec):
    """A decoder-only transformer, dense or MoE."""

    name: Name
    """Catalog name (lower-case, as typed on the command line)."""
    aliases: list[Name] = Field([], max_length=64)
    """Other names that resolve to this model."""
    display_name: Name | None = None
    """Name as its publisher writes it."""
    source: list[str] = Field(min_length=1)
    """Where the architecture numbers come from (config.json, paper table)."""
    hidden_size: Width
    """Model width h (hidden_size / d_model)."""
    num_layers: LayerCount
    """Decoder layers of the main model, MTP excluded (num_hidden_layers)."""
    vocab_size: Annotated[int, NotBool, Field(gt=0, le=2**24)]
    """Vocabulary size of the embedding and output head."""
    tie_embeddings: bool = False
    """Output head shares the input embedding's weights (tie_word_embeddings)."""
    position_embedding: Literal["rope", "learned"] = "rope"
    """rope: no parameters; learned: a max_position_embeddings x hidden table (GPT-3)."""
    max_position_embeddings: PositiveInt | None = None
    """Longest position the model supports; sizes the learned position table."""
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """RMSNorm (weight only) or LayerNorm (weight and bias)."""
    post_norms: bool = False
    """A norm on the output of the attention block and of the MLP too, before each residual add
    (Gemma 2/3: four norms per layer, 'sandwich' norms); adds two norms' parameters, work and
    saved inputs per layer."""
    rope: RoPE | None = None
    """Rotary embedding details (base, partial rotation, context-extension scaling); None: not
    stated (Megatron's defaults)."""
    logit_softcap: PositiveFloat | None = None
    """Final logits soft-capped as cap * tanh(logits / cap) (final_logit_softcapping; Gemma 2:
    30); None: no capping."""
    attn_logit_softcap: PositiveFloat | None = None
    """Attention scores soft-capped inside the attention kernel (attn_logit_softcapping; Gemma 2:
    50); no memory effect, its time is the kernel's."""
    attention: Attention
    """Attention block: GQA/MHA or MLA."""
    ffn: FFN
    """Dense feed-forward block; its activation also shapes the experts."""
    moe: MoE | None = None
    """MoE layers; None for dense models."""
    mtp_layers: Annotated[int, NotBool, Field(ge=0, le=64)] = 0
    """Multi-token-prediction modules (num_nextn_predict_layers), each a full decoder layer of the
    last layer's kind plus two norms and a 2h x h projection; counted apart from the main model."""
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on attention probabilities (0 for modern LLMs; 0.1 for 2022-era GPT setups)."""
    hidden_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout after the attention and MLP blocks."""
    published: Published | None = None
    """The publisher's own parameter counts."""
    reference_job: ReferenceJob | None = None
    """A published training setup: the default job."""
    training_tokens: Sourced[PositiveFloat] | None = None
    """Published pre-training token budget (for GPU-hours and days in `compare`)."""
    notes: str | None = None
    """Anything about the architecture the fields above do not capture."""

    @model_validator(mode="after")
    def _moe_layers_fit(self) -> ModelSpec:
        if self.moe is not None and self.moe.first_k_dense > self.num_layers:
            raise ValueError(
                f"moe.first_k_dense ({self.moe.first_k_dense}) exceeds num_layers ({self.num_layers})"
            )
        if self.moe is not None and self.moe.layer_pattern is not None:
            pattern = self.moe.layer_pattern
            if len(pattern) != self.num_layers:
                raise ValueError(f"moe.layer_pattern lists {len(pattern)} layers; the model has {self.num_layers}")
            if not any(pattern):
                raise ValueError("moe.layer_pattern has no MoE layer (1): a dense model has no moe block")
        a = self.attention
        if a.kind == "gqa" and a.no_rope_every is not None and self.position_embedding != "rope":
            raise ValueError("attention.no_rope_every needs rotary position embeddings")
        return self

    # ---- layer structure -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` (0-based) is an MoE layer: moe.layer_pattern when given,
        else DeepSeek's rule (from first_k_dense on, every layer_freq-th)."""
        m = self.moe
        if m is None:
            return False
        if m.layer_pattern is not None:
            return bool(m.layer_pattern[index])
        return index >= m.first_k_dense and index % m.layer_freq == 0

    @cached_property
    def layer_kinds(self) -> tuple[str, ...]:
        """'dense' or 'moe' for each decoder layer of the main model."""
        return tuple("moe" if self.is_moe_layer(i) else "dense" for i in range(self.num_layers))

    @property
    def mtp_kind(self) -> str:
        """MTP modules copy the kind of the last decoder layer (Megatron and DeepSeek-V3)."""
        return self.layer_kinds[-1]

    @property
    def num_moe_layers(self) -> int:
        return sum(k == "moe" for k in self.layer_kinds)

    # ---- counts (see planner.specs.params) ---------------------------------------------------
    @cached_property
    def params(self):  # -> planner.specs.params.ParamCounts
        return count_params(self)
