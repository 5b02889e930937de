"""A Megatron-LM command line that leaves an architecture flag out builds the model Megatron's own
defaults give (megatron-core core_v0.19.0: arguments.py, TransformerConfig, validate_args,
argument_utils.py); the sources are cited in planner/launchers/megatron/model.py."""

from __future__ import annotations

import pytest

from planner.launchers.megatron.model import match_catalog_model, model_from_hints
from planner.launchers.megatron.read import plan_from_megatron_args

# Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh: the model flags it gives, no others.
GPT3_EXAMPLE = """#!/bin/bash
GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend auto
)
TRAINING_ARGS=(--micro-batch-size 1 --global-batch-size 1536 --fp16)
MODEL_PARALLEL_ARGS=(--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16)
torchrun --nproc_per_node 8 --nnodes 16 pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ${TRAINING_ARGS[@]} \\
    ${MODEL_PARALLEL_ARGS[@]}
"""


def hints(extra: str = "", base: str = "--num-layers 4 --hidden-size 1024 --num-attention-heads 8") -> dict:
    return plan_from_megatron_args(f"{base} {extra}").model_hints


def test_absent_flags_read_as_megatrons_defaults():
    h = plan_from_megatron_args(GPT3_EXAMPLE).model_hints
    assert h["norm"] == "layernorm"  # TransformerConfig.normalization
    assert h["position_embedding"] == "learned" and "rope" not in h  # --position-embedding-type learned_absolute
    assert h["tie_embeddings"] is True  # --untie-embeddings-and-output-weights is store_true
    assert h["attention_dropout"] == h["hidden_dropout"] == 0.1  # TransformerConfig dropouts
    assert h["ffn"] == {"activation": "gelu", "bias": True, "hidden_size": 4 * 12288}  # validate_args, add_bias_linear
    assert h["attention"]["num_kv_heads"] == 96 and h["attention"]["qkv_bias"] is True
    model, note = match_catalog_model(h)
    assert model.name == "gpt3-175b" and note is None  # the GPT-3 the example trains


def test_given_flags_win_over_the_defaults():
    h = hints("--normalization RMSNorm --untie-embeddings-and-output-weights --attention-dropout 0.0 "
              "--hidden-dropout 0.0 --swiglu --disable-bias-linear")
    assert (h["norm"], h["tie_embeddings"], h["attention_dropout"], h["hidden_dropout"]) == ("rmsnorm", False, 0.0, 0.0)
    assert h["ffn"] == {"activation": "swiglu", "bias": False, "hidden_size": int(4 * 1024 * 2 / 3 / 64) * 64}


def test_mla_defaults():
    h = hints("--multi-latent-attention --position-embedding-type rope")
    a = h["attention"]
    # _add_mla_args: --kv-lora-rank 32 (not DeepSeek's 512), head dims 128 / 64 / 128, no query LoRA
    assert (a["kv_lora_rank"], a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["v_head_dim"]) == (32, 128, 64, 128)
    assert a["q_lora_rank"] is None
    # MLATransformerConfig.rope_type 'yarn' with --rotary-scaling-factor's default 1.0
    assert h["rope"] == {"theta": 10000.0, "percent": 1.0, "scaling": "yarn", "factor": 1.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
    assert hints("--multi-latent-attention --rope-type rope")["rope"] == {"theta": 10000.0, "percent": 1.0}


@pytest.mark.parametrize("flags,rope", [
    ("--position-embedding-type rope", {"theta": 10000.0, "percent": 1.0}),
    ("--use-rotary-position-embeddings --rotary-base 500000 --rotary-percent 0.5",
     {"theta": 500000.0, "percent": 0.5}),
    ("--position-embedding-type rope --use-rope-scaling",
     {"theta": 10000.0, "percent": 1.0, "scaling": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    ("--position-embedding-type rope --rotary-seq-len-interpolation-factor 4",
     {"theta": 10000.0, "percent": 1.0, "scaling": "linear", "factor": 4.0}),
    ("--position-embedding-type yarn --rotary-scaling-factor 32 --no-yarn-correction-range-round-to-int",
     {"theta": 10000.0, "percent": 1.0, "scaling": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
      "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}),
    ("--position-embedding-type yarn --mscale 0.707 --yarn-beta-fast 8",
     {"theta": 10000.0, "percent": 1.0, "scaling": "yarn", "factor": 1.0, "original_max_position_embeddings": 4096,
      "beta_fast": 8.0, "beta_slow": 1.0, "truncate": True, "mscale": 0.707}),
])
def test_rotary_flags_build_the_rope(flags, rope):
    h = hints(flags + " --vocab-size 32000")
    assert h["rope"] == rope
    assert model_from_hints(h).rope.model_dump(exclude_none=True) == {"scaling": "none", **rope}


def test_gpt_oss_unit_and_router_bias():
    # Megatron-Bridge's GPTOSSProvider: quick_gelu, gated, glu_linear_offset 1.0, clamp 7.0
    gpt_oss = "--quick-geglu --glu-linear-offset 1.0 --activation-func-clamp-value 7.0"
    h = hints(gpt_oss + " --num-experts 8 --ffn-hidden-size 512")
    assert h["ffn"] == {"activation": "swiglu", "bias": False, "clamp": 7.0, "hidden_size": 512}  # no dense MLP
    assert h["moe"]["router_linear_bias"] is True and h["moe"]["expert_bias"] is True  # router.py: add_bias_linear
    assert hints("--quick-geglu")["ffn"]["activation"] == "geglu"  # quick-GELU gated, without gpt-oss's offset
    assert hints("--activation-func-clamp-value 7.0")["ffn"] == {"activation": "gelu", "bias": True,
                                                                  "hidden_size": 4096}  # clamps gated units only
    plain = hints("--num-experts 8 --disable-bias-linear")["moe"]
    assert plain["router_linear_bias"] is False and plain["expert_bias"] is False


def test_shared_experts_read_as_the_routed_width_count():
    h = hints("--num-experts 8 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 512")
    assert h["moe"]["num_shared_experts"] == 2 and "shared_expert_hidden_size" not in h["moe"]
    odd = hints("--num-experts 8 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 384")["moe"]
    assert (odd["num_shared_experts"], odd["shared_expert_hidden_size"]) == (1, 384)


def test_a_missing_micro_batch_size_is_noted_megatron_has_no_default():
    # TrainingConfig.micro_batch_size is None and validate_args asserts it is set
    args = plan_from_megatron_args("--num-layers 4 --hidden-size 1024 --num-attention-heads 8")
    assert args.plan.mbs == 1 and any("--micro-batch-size not given" in n for n in args.notes)
    given = plan_from_megatron_args("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --micro-batch-size 2")
    assert given.plan.mbs == 2 and not any("--micro-batch-size" in n for n in given.notes)
