"""Parameter counts per component, with the rule by which each component is sharded.

Counting convention: every weight, bias and norm parameter is counted once. The main model
excludes MTP modules (reported apart, as DeepSeek does); MTP modules share the embedding and output
head with the main model, so those are not counted again. Tied embeddings count once.

Active parameters, one rule for every model (catalog or imported): planner's ``active`` is the
total less the routed experts a token is not sent to (each MoE layer keeps top_k/num_experts of
its routed experts); the input embedding and the output head are in it, so a dense model's active
count is its total (:data:`ACTIVE_CONVENTION`). Publishers differ (DeepSeek, Kimi and OpenAI leave
the input embedding out, Qwen, Mistral and Meta count it): a model's ``published`` block keeps the
publisher's figure with its convention, and ``active_excl_input_embedding`` gives the other count.

Sharding rules follow Megatron-Core's module construction (and its theoretical-memory estimator
after PR #4687): column/row-parallel linears are split by TP; norms, the router and MLA's
down-projections are replicated; routed experts are split by expert-TP x EP; the embedding and
output head are vocabulary-parallel (split by TP); K/V projections are split by min(TP, kv heads)
because Megatron replicates key/value heads when TP exceeds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec

Shard = Literal["tp", "tp_kv", "replicated", "expert", "vocab"]


@dataclass(frozen=True)
class Component:
    """A group of parameters that is sharded the same way."""

    name: str
    params: int
    shard: Shard


@dataclass(frozen=True)
class Block:
    """The parameters of one repeated unit (a decoder layer, an MTP module, the embedding...)."""

    kind: str
    components: tuple[Component, ...]

    @property
    def total(self) -> int:
        return sum(c.params for c in self.components)

    def by_shard(self, shard: Shard) -> int:
        return sum(c.params for c in self.components if c.shard == shard)

    def named(self, name: str) -> int:
        return sum(c.params for c in self.components if c.name == name)


def _norm(model: ModelSpec, width: int) -> int:
    return width * (2 if model.norm == "layernorm" else 1)


def attention_components(model: ModelSpec) -> list[Component]:
    a, h = model.attention, model.hidden_size
    if a.kind == "mla":
        nh, qk = a.num_heads, a.qk_head_dim
        comps = []
        if a.q_lora_rank:
            comps += [
                Component("attn.q_down", h * a.q_lora_rank + a.q_lora_rank, "replicated"),
                Component("attn.q_up", a.q_lora_rank * nh * qk, "tp"),
            ]
        else:
            comps.append(Component("attn.q_proj", h * nh * qk, "tp"))
        comps += [
            Component(
                "attn.kv_down", h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank, "replicated"
            ),
            Component("attn.kv_up", a.kv_lora_rank * nh * (a.qk_nope_head_dim + a.v_head_dim), "tp"),
            Component("attn.out", nh * a.v_head_dim * h, "tp"),
        ]
        return comps
    nh, nkv, hd = a.num_heads, a.num_kv_heads, a.head_dim
    comps = [
        Component("attn.q", h * nh * hd + (nh * hd if a.qkv_bias else 0), "tp"),
        Component("attn.kv", 2 * (h * nkv * hd + (nkv * hd if a.qkv_bias else 0)), "tp_kv"),
        Component("attn.out", nh * hd * h, "tp"),
    ]
    if a.output_bias:
        comps.append(Component("attn.out_bias", h, "replicated"))
    if a.qk_norm:
        comps.append(Component("attn.qk_norm", 2 * hd, "replicated"))
    if a.sinks:
        comps.append(Component("attn.sinks", nh, "tp"))
    return comps


def mlp_params(model: ModelSpec, width: int, bias: bool) -> tuple[int, int]:
    """(sharded, replicated) parameters of one MLP of intermediate ``width``."""
    h = model.hidden_size
    n_in = 2 if model.ffn.gated else 1
    sharded = (n_in + 1) * h * width + (n_in * width if bias else 0)
    return sharded, (h if bias else 0)


def layer_block(model: ModelSpec, kind: str) -> Block:
    """One decoder layer: attention, two norms, and a dense MLP or an MoE block."""
    h = model.hidden_size
    comps = attention_components(model)
    # Pre-attention and pre-MLP norms; Gemma's post-attention and post-MLP norms too.
    comps.append(Component("norms", (4 if model.post_norms else 2) * _norm(model, h), "replicated"))
    if kind == "dense":
        sh, rep = mlp_params(model, model.ffn.hidden_size, model.ffn.bias)
        comps.append(Component("mlp", sh, "tp"))
        if rep:
            comps.append(Component("mlp.bias_out", rep, "replicated"))
    else:
        m = model.moe
        assert m is not None
        comps.append(
            Component("router", h * m.num_experts + m.num_experts * (m.router_bias + m.router_linear_bias), "replicated")
        )
        e_sh, e_rep = mlp_params(model, m.expert_hidden_size, m.expert_bias)
        comps.append(Component("experts", m.num_experts * (e_sh + e_rep), "expert"))
        if m.shared_hidden:
            sh, _ = mlp_params(model, m.shared_hidden, False)
            comps.append(Component("shared_experts", sh, "tp"))
    return Block(kind, tuple(comps))


def mtp_block(model: ModelSpec) -> Block:
    """One MTP module (DeepSeek-V3 sec. 2.2): enorm + hnorm + eh_proj (2h -> h) + a decoder layer
    + its output norm; the embedding and output head are shared with the main model."""
    h = model.hidden_size
    layer = layer_block(model, model.mtp_kind)
    extra = (
        Component("mtp.norms", 3 * _norm(model, h), "replicated"),
        Component("mtp.eh_proj", 2 * h * h, "tp"),
    )
    return Block("mtp", layer.components + extra)


def embedding_block(model: ModelSpec) -> Block:
    comps = [Component("embedding", model.vocab_size * model.hidden_size, "vocab")]
    if model.position_embedding == "learned":
        comps.append(
            Component("position_embedding", (model.max_position_embeddings or 0) * model.hidden_size, "replicated")
        )
    return Block("embedding", tuple(comps))


def head_block(model: ModelSpec) -> Block:
    """Final norm and, if untied, the output projection."""
    comps = [Component("final_norm", _norm(model, model.hidden_size), "replicated")]
    if not model.tie_embeddings:
        comps.append(Component("output", model.vocab_size * model.hidden_size, "vocab"))
    return Block("head", tuple(comps))


@dataclass(frozen=True)
class ParamCounts:
    """Totals and per-component counts for a model (see the module docstring for conventions)."""

    total: int
    """Main model: embedding, decoder layers, final norm and (untied) output head."""
    mtp: int
    """Unique parameters of all MTP modules (not in ``total``)."""
    active_incl_embedding: int
    """Per-token activated parameters counting the input embedding lookup and the head."""
    active_excl_input_embedding: int
    """The same without the input embedding (DeepSeek, Kimi, OpenAI convention)."""
    mtp_active: int
    """Per-token activated MTP parameters (beyond the shared head)."""
    components: dict[str, int] = field(default_factory=dict)
    """Whole-model totals by component name (embedding, attention, mlp, experts, ...)."""
    per_layer: dict[str, int] = field(default_factory=dict)
    """Parameters of one layer of each kind ('dense', 'moe')."""

    def active(self, convention: str = "incl_embedding") -> int:
        """Active parameters under ``convention``; planner's own count is the default
        (:data:`ACTIVE_CONVENTION`)."""
        return self.active_incl_embedding if convention == "incl_embedding" else self.active_excl_input_embedding


ACTIVE_CONVENTION = "incl_embedding"
"""The convention of planner's own active count, for every model (see the module docstring)."""


def _active_in_layer(model: ModelSpec, block: Block) -> int:
    """Per-token activated parameters of a layer: all but the routed experts not chosen."""
    if block.kind != "moe" and block.kind != "mtp":
        return block.total
    routed = block.named("experts")
    m = model.moe
    if not routed or m is None:
        return block.total
    return block.total - routed + routed * m.top_k // m.num_experts


def _component_group(name: str) -> str:
    if name.startswith("attn."):
        return "attention"
    if name.startswith("mlp"):
        return "dense_mlp"
    return name


def count_params(model: ModelSpec) -> ParamCounts:
    blocks = {kind: layer_block(model, kind) for kind in set(model.layer_kinds)}
    emb, head = embedding_block(model), head_block(model)
    components: dict[str, int] = {}
    for b in [emb, head] + [blocks[k] for k in model.layer_kinds]:
        for c in b.components:
            g = _component_group(c.name)
            components[g] = components.get(g, 0) + c.params
    total = sum(components.values())
    mtp = mtp_block(model).total * model.mtp_layers if model.mtp_layers else 0
    layers_active = sum(_active_in_layer(model, blocks[k]) for k in model.layer_kinds)
    head_active = head.total if not model.tie_embeddings else head.total + emb.named("embedding")
    active_excl = layers_active + head_active
    # With tied embeddings the shared matrix is already counted once, as the head.
    active_incl = active_excl + emb.total - (emb.named("embedding") if model.tie_embeddings else 0)
    mtp_active = 0
    if model.mtp_layers:
        mb = mtp_block(model)
        mtp_active = _active_in_layer(model, mb) * model.mtp_layers
    return ParamCounts(
        total=total,
        mtp=mtp,
        active_incl_embedding=active_incl,
        active_excl_input_embedding=active_excl,
        mtp_active=mtp_active,
        components=components,
        per_layer={k: b.total for k, b in blocks.items()},
    )
