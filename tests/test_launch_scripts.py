"""The six public Megatron launch scripts of issue 22, read as bash reads them: one test per script
asserting the degrees, precision (with the FP8 recipe), recompute, MTP and batch worked out by hand
from the script, and the one route from a script to a job that check and explain share.

The fixtures (tests/fixtures/launch_scripts/, each with a SOURCE line) transcribe the lines of each
script that decide its launch command. With PLANNER_PUBLIC_SCRIPTS pointing at a folder holding the
original files, test_transcriptions_read_like_the_originals checks that both give the same command.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.launchers.megatron.model import model_hints, parse_moe_layer_freq
from planner.launchers.megatron.read import job_from_script, plan_from_megatron_args, read_script
from planner.launchers.registry import launcher_violations

FIXTURES = Path(__file__).parent / "fixtures" / "launch_scripts"

# The Qwen3 script takes its configuration as 27 positional arguments; these are the README's
# pretraining example with the A22B model, FP8, TP4/PP8/EP8, full recompute, on 32 DLC nodes.
PAI_ARGS = ("dlc A22B 1 1024 1e-5 1e-6 4096 4096 fp8 4 8 1 1 8 true true true false full false 100000 "
            "/mnt/data /mnt/data none 10000000000 100000000 /mnt/out").split()
PAI_ENV = {"WORLD_SIZE": "32", "RANK": "0", "KUBERNETES_CONTAINER_RESOURCE_GPU": "8", "MP_PP0_LAYERS": "10"}


def _read(name: str, **kw):
    return job_from_script(FIXTURES / name, **kw)


def _plan(sj) -> dict:
    p = sj.plan
    return {k: getattr(p, k) for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "sharding", "recompute",
                                        "precision", "moments", "layout", "dispatcher")}


def _job(sj) -> tuple:
    return sj.job.gpus, sj.job.global_batch, sj.job.seq_len


def test_every_fixture_names_its_source():
    names = sorted(p.name for p in FIXTURES.glob("*.sh"))
    assert len(names) == 6
    for name in names:
        first = (FIXTURES / name).read_text().splitlines()[0]
        assert re.fullmatch(r"# SOURCE: [\w.-]+/[\w.-]+ \S+ @ [0-9a-f]{40}( \(\w+\))?", first), first


def test_llama3_8b_h100_fp8():
    sj = _read("llama3_8b_h100_fp8.sh", hw="h100")
    a = sj.args
    assert sj.model.name == "llama3.1-8b" and sj.model_source == "catalog match"
    assert a.launcher["--nproc-per-node"] == "8" and a.launcher["--nnodes"] == "1"
    assert _job(sj) == (8, 128, 8192)
    # "--fp8-format hybrid" is one array element, expanded unquoted: bash splits it into two words
    assert a.fp8 == {"format": "hybrid", "recipe": "delayed"}
    assert _plan(sj) == dict(tp=1, pp=1, vpp=1, cp=1, ep=1, etp=None, mbs=1, sharding="dist_opt", recompute="none",
                             precision="fp8", moments="fp32", layout=None, dispatcher=None)
    assert sj.model.mtp_layers == 0 and a.model_hints["vocab_size"] == 128256
    assert a.values["fp8_param_gather"] is True and a.values["grad_reduce_in_bf16"] is True
    assert "--pipeline-model-parallel-size" not in a.used_flags  # commented out inside the array
    assert a.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert a.unresolved == ["$PWD"] and a.not_run == ['$(dirname "$CHECKPOINT_PATH")']
    assert any("if [ ! -f \"$PRETRAIN_SCRIPT_PATH\" ]" in n for n in a.notes)  # a file test is not guessed


def test_llama3_8b_fp8_prediction_has_bf16_gradients_and_fp8_gathers(capsys, tmp_path):
    """--grad-reduce-in-bf16 halves the main-gradient buffer and the gradient reduce-scatter;
    --fp8-param-gather gathers the Transformer Engine weights in FP8 (the embedding and output
    layer stay bf16). The same script without the two flags predicts fp32 gradients and bf16
    gathers."""
    from planner.specs.params import count_params, embedding_block, head_block

    script = FIXTURES / "llama3_8b_h100_fp8.sh"
    sj = _read(script.name, hw="h100")
    assert (sj.plan.grad_reduce, sj.plan.param_gather) == ("bf16", "fp8")
    assert not [f for f in sj.args.unknown_flags if "grad-reduce" in f or "fp8-param-gather" in f]
    plain = tmp_path / "plain.sh"
    plain.write_text(script.read_text().replace(" --grad-reduce-in-bf16", "").replace('"--fp8-param-gather"', ""))
    p0 = job_from_script(plain, hw="h100").plan
    assert (p0.grad_reduce, p0.param_gather) == ("fp32", "bf16")
    flags = _cli_json(capsys, "check", "--megatron-args", str(script), "--hw", "h100", "--json")
    without = _cli_json(capsys, "check", "--megatron-args", str(plain), "--hw", "h100", "--json")
    m = sj.model
    params = count_params(m).total  # TP=PP=1: every GPU holds the whole model
    emb_head = embedding_block(m).total + head_block(m).total
    assert flags["memory"]["components"]["gradients"] == 2 * params
    assert without["memory"]["components"]["gradients"] == 4 * params
    assert flags["memory"]["peak_bytes"] < without["memory"]["peak_bytes"] - 15 * 2**30
    t, t0 = flags["time"]["breakdown"], without["time"]["breakdown"]
    grad = t["dp_grad"] + flags["time"]["hidden_communication"]["dp_grad"]
    grad0 = t0["dp_grad"] + without["time"]["hidden_communication"]["dp_grad"]
    assert grad == pytest.approx(grad0 / 2, rel=1e-3)
    gather = t["dp_param"] + flags["time"]["hidden_communication"]["dp_param"]
    gather0 = t0["dp_param"] + without["time"]["hidden_communication"]["dp_param"]
    assert gather == pytest.approx(gather0 * ((params - emb_head) * 1 + emb_head * 2) / (2 * params), rel=1e-3)
    assert "precision=fp8,grad_reduce=bf16,param_gather=fp8" in flags["plan"]


def test_gpt3_175b_distributed():
    sj = _read("gpt3_175b_distributed.sh", hw="a100-80gb")
    a = sj.args
    assert sj.model.name == "gpt3-175b"  # learned positions, LayerNorm, GELU, biases (no --disable-bias-linear)
    assert a.model_hints["attention"]["qkv_bias"] and a.model_hints["ffn"]["bias"]
    assert _job(sj) == (8, 1536, 2048)  # NUM_NODES=1: one node of 8
    assert _plan(sj) == dict(tp=8, pp=16, vpp=1, cp=1, ep=1, etp=None, mbs=1, sharding="ddp", recompute="none",
                             precision="bf16", moments="fp32", layout=None, dispatcher=None)
    assert sj.model.mtp_layers == 0
    assert any("--fp16 modeled as bf16" in n for n in a.notes)
    # the quoted schedule is one array element; the unquoted ${TRAINING_ARGS[@]} splits it: Megatron gets
    # "0:16" as the value and five stray words it refuses
    assert a.values["step_batch_size_schedule"] == "0:16"
    assert [u for u in a.unknown_flags if "not a megatron" in u] == [
        f"{w} (not a megatron-core 0.19.2 flag)" for w in ("2.4B:320", "4.8B:624", "7.2B:928", "9.6B:1232", "12B:1536")]
    assert a.unresolved == ["$1", "$2", "$3", "$4", "$5"] and a.values["vocab_file"] == "$3"
    rules = [v.rule for v in launcher_violations(sj.plan, sj.model, sj.job, "megatron", hw=sj.hardware)]
    assert rules == ["world-divisibility"]  # TP8 x PP16 needs 128 GPUs, the script launches one node


def test_mixtral_8x7b_distributed():
    sj = _read("mixtral_8x7b_distributed.sh", hw="h100", environ={"SLURM_NNODES": "4"})
    a = sj.args
    assert sj.model.name == "mixtral-8x7b"
    assert a.launcher["--nnodes"] == "4" and _job(sj) == (32, 256, 4096)  # NNODES=${SLURM_NNODES:-"1"}
    assert _plan(sj) == dict(tp=1, pp=4, vpp=1, cp=1, ep=8, etp=1, mbs=1, sharding="dist_opt", recompute="none",
                             precision="bf16", moments="fp32", layout=None, dispatcher="alltoall")
    assert sj.model.mtp_layers == 0 and a.fp8 is None
    assert a.unresolved == ["$1", "$2", "$3", "$WANDB_API_KEY"]
    assert "--wandb-project" not in a.ignored_flags  # [ -n "${WANDB_API_KEY}" ] is false without the key
    # without SLURM_NNODES the quoted default "1" applies
    assert job_from_script(FIXTURES / "mixtral_8x7b_distributed.sh", hw="h100").job.gpus == 8


def test_deepseek_v3_gb200_guide():
    sj = _read("deepseek_v3_gb200_guide.sh", hw="gb200-nvl72", gpus=256)
    a = sj.args
    assert a.launcher == {}  # bindpcie under srun: the world size is not in the script
    with pytest.raises(PlannerError, match="does not give the value of --gpus"):
        _read("deepseek_v3_gb200_guide.sh", hw="gb200-nvl72")
    assert _job(sj) == (256, 2048, 4096)
    assert _plan(sj) == dict(tp=1, pp=8, vpp=4, cp=1, ep=32, etp=1, mbs=1, sharding="dist_opt",
                             recompute="moe_act+mlp", precision="fp8", moments="bf16", layout="Et|(tt|)*30L",
                             dispatcher="hybridep")
    assert a.fp8 == {"format": "e4m3", "recipe": "mxfp8"}
    # no --mtp-num-layers: Megatron builds no MTP; the catalog's V3 (one MTP layer) with that depth
    assert sj.model.mtp_layers == 0 and sj.model.name == "deepseek-v3-mtp0" and sj.model_source == "catalog match"
    assert sj.model.moe.first_k_dense == 3  # the unquoted ([0]*3+[1]*58), read although bash would refuse the '('
    assert any("unquoted '('" in n for n in a.notes)
    assert launcher_violations(sj.plan, sj.model, sj.job, "megatron", hw=sj.hardware) == []


def test_megatron_fsdp_deepseek_v3_sbatch():
    sj = _read("mfsdp_deepseek_v3.sbatch.sh", hw="gb200-nvl72", gpus=256)
    a = sj.args
    # the command runs inside bash -c in the here-document given to sbatch; the quoted defaults
    # (${SHARDING_STRATEGY:-"optim_grads_params"}) come out without their quotes
    assert a.script_line is not None and any("bash -c" in n and "sbatch" in n for n in a.notes)
    assert a.values["data_parallel_sharding_strategy"] == "optim_grads_params"
    assert _job(sj) == (256, 2048, 4096)
    assert _plan(sj) == dict(tp=1, pp=1, vpp=1, cp=1, ep=8, etp=1, mbs=4, sharding="fsdp",
                             recompute="mla_up_proj+layernorm+mlp+moe", precision="bf16", moments="fp32",
                             layout=None, dispatcher="hybridep")
    assert sj.model.name == "deepseek-v3" and sj.model.mtp_layers == 1 and a.fp8 is None
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in a.env and a.values["ckpt_format"] == "fsdp_dtensor"
    assert a.unresolved == ["$SLURM_NODEID", "$PYTHONPATH", "$SLURM_JOB_ID"]


def test_pai_qwen3_235b():
    sj = _read("pai_qwen3_moe.sh", hw="h100", script_args=PAI_ARGS, environ=PAI_ENV)
    a = sj.args
    assert sj.model.name == "qwen3-235b-a22b" and a.model_hints["vocab_size"] == 151936  # --padded-vocab-size
    assert a.launcher["--nproc-per-node"] == "8" and a.launcher["--nnodes"] == "32" and _job(sj) == (256, 1024, 4096)
    # MP_PP0_LAYERS=10: 10 layers first, (94 - 10) / 7 = 12 on each later stage
    assert _plan(sj) == dict(tp=4, pp=8, vpp=1, cp=1, ep=8, etp=1, mbs=1, sharding="dist_opt", recompute="full",
                             precision="fp8", moments="fp32", layout="Etttttttttt|(tttttttttttt|)*6ttttttttttttL",
                             dispatcher="alltoall")
    assert a.fp8 == {"format": "hybrid", "recipe": "blockwise"} and sj.model.mtp_layers == 0
    assert a.values["train_iters"] == "2384"  # $(( 10000000000 / 1024 / 4096 ))
    # TP_COMM_OVERLAP=$(( (4 > 1) ? 1 : 0 )) picks the overlap options, but run_cmd never passes them
    assert not {"tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather"} & set(a.values)
    assert "--train-mode pretrain (not a megatron-core 0.19.2 flag)" in a.unknown_flags
    assert a.unresolved == ["$MP_VP"]
    # in the single-machine environment the GPU count comes from a command planner does not run
    with pytest.raises(PlannerError, match="--nproc-per-node is `python -c"):
        _read("pai_qwen3_moe.sh", hw="h100", script_args=["dsw", *PAI_ARGS[1:]])


@pytest.mark.skipif(not os.environ.get("PLANNER_PUBLIC_SCRIPTS"), reason="PLANNER_PUBLIC_SCRIPTS (a folder with the "
                    "six original scripts) is not set")
def test_transcriptions_read_like_the_originals():
    originals = Path(os.environ["PLANNER_PUBLIC_SCRIPTS"])
    pairs = {"llama3_8b_h100_fp8.sh": "train_llama3_8b_h100_fp8.sh",
             "gpt3_175b_distributed.sh": "train_gpt3_175b_distributed.sh",
             "mixtral_8x7b_distributed.sh": "train_mixtral_8x7b_distributed.sh",
             "deepseek_v3_gb200_guide.sh": "deepseek_v3_gb200_launch.sh",
             "mfsdp_deepseek_v3.sbatch.sh": "sbatch_mfsdp_deepseek_v3.sh", "pai_qwen3_moe.sh": "pai_run_mcore_qwen3.sh"}
    for mine, theirs in pairs.items():
        kw = dict(args=PAI_ARGS, environ=PAI_ENV) if mine.startswith("pai") else {}
        a = read_script((FIXTURES / mine).read_text(), **kw)
        b = read_script((originals / theirs).read_text(), **kw)
        assert (a.argv, a.launcher) == (b.argv, b.launcher), mine


def _cli_json(capsys, *argv) -> dict:
    from planner.cli import main

    code = main(list(argv))
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out)


def test_check_and_explain_read_the_same_model_and_plan(capsys):
    script = str(FIXTURES / "deepseek_v3_gb200_guide.sh")
    opts = ["--megatron-args", script, "--gpus", "256", "--hw", "gb200-nvl72", "--json"]
    checked = _cli_json(capsys, "check", *opts)
    explained = _cli_json(capsys, "explain", *opts)
    assert checked["model"] == explained["model"]["name"] == "deepseek-v3-mtp0"
    assert checked["plan"] == explained["plan_string"]
    assert checked["job"]["gpus"] == explained["job"]["gpus"] == 256


def test_script_environment_and_arguments_from_the_command_line(capsys):
    checked = _cli_json(capsys, "check", "--megatron-args", str(FIXTURES / "pai_qwen3_moe.sh"), "--hw", "h100",
                        "--script-args", " ".join(PAI_ARGS), *[x for k, v in PAI_ENV.items()
                                                               for x in ("--script-env", f"{k}={v}")], "--json")
    assert checked["model"] == "qwen3-235b-a22b" and checked["job"]["gpus"] == 256
    assert "tp=4,pp=8" in checked["plan"]


# ---- check: FAIL and exit status 1 ---------------------------------------------------------------

def _check(capsys, *argv) -> tuple[int, str, dict]:
    from planner.cli import main

    code = main(["check", *argv])
    text = capsys.readouterr().out
    code_json = main(["check", *argv, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == code_json
    return code, text, data


def test_check_fails_on_a_predicted_out_of_memory(capsys):
    # Megatron-LM's FP8 Llama 3 8B script read at 32k tokens per sequence (TP=1, no recompute): the
    # launch passes every start-up check, and its activations alone exceed an H100's 80 GB.
    code, text, data = _check(capsys, "--megatron-args", str(FIXTURES / "llama3_8b_h100_fp8.sh"), "--hw", "h100",
                              "--seq-len", "32768")
    assert code == 1 and data["status"] == "FAIL" and data["violations"] == []
    assert [f["rule"] for f in data["failures"]] == ["out-of-memory"] and data["memory"]["fits"] is False
    assert "FAIL: the plan does not fit in memory" in text and "would run out of memory" in text
    assert "OK:" not in text


def test_check_fails_on_an_argument_megatron_rejects(capsys):
    # The DeepSeek-V3 GB200 guide passes --cross-entropy-loss-fusion --cross-entropy-fusion-impl te,
    # which megatron-core 0.19.2's validate_args refuses (arguments.py: 'disabled due to stability issues').
    code, text, data = _check(capsys, "--megatron-args", str(FIXTURES / "deepseek_v3_gb200_guide.sh"), "--gpus", "256",
                              "--hw", "gb200-nvl72")
    assert code == 1 and data["status"] == "FAIL"
    assert [v["rule"] for v in data["violations"]] == ["cross-entropy-te-fusion"]
    assert "--cross-entropy-fusion-impl te" in text and "FAIL: 1 rule(s) broken for Megatron-LM" in text
    assert "memory" not in data  # no prediction for a launch that does not start


def test_check_names_every_word_argparse_refuses(capsys):
    # Megatron-LM's GPT-3 175B example splits its quoted --step-batch-size-schedule through an unquoted
    # ${TRAINING_ARGS[@]}: argparse takes '0:16' as the value and exits on the five words after it.
    code, text, data = _check(capsys, "--megatron-args", str(FIXTURES / "gpt3_175b_distributed.sh"), "--hw",
                              "a100-80gb")
    assert code == 1
    refused = [v["message"] for v in data["violations"] if v["rule"] == "argparse"]
    assert len(refused) == 5 and all("unrecognized arguments" in m for m in refused)
    for word in ("2.4B:320", "4.8B:624", "7.2B:928", "9.6B:1232", "12B:1536"):
        assert word in text


def test_check_names_invalid_choices_and_numbers_from_the_parser():
    # The parser's own choices and numeric types (flags.py, dumped from megatron-core 0.19.2).
    from planner.launchers.megatron.flags import CHOICES, NUMERIC
    from planner.launchers.megatron.read import plan_from_megatron_args
    from planner.launchers.megatron.rules import args_violations

    assert CHOICES["--cross-entropy-fusion-impl"] == ("native", "te")
    assert CHOICES["--fp8-recipe"] == ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")
    assert NUMERIC["--num-layers"] == "int" and NUMERIC["--lr"] == "float"
    args = plan_from_megatron_args(SMALL + " --vocab-size 32000 --fp8-format e4m3 --fp8-recipe mxfp9 --lr fast "
                                   "--no-such-flag 3 --recompute-granularity $GRAN")
    messages = [v.message for v in args_violations(args) if v.rule == "argparse"]
    assert any("--fp8-recipe mxfp9 (invalid choice" in m and "tensorwise, delayed" in m for m in messages)
    assert any("--lr fast (not a number" in m for m in messages)
    assert any("--no-such-flag 3 (not a megatron-core 0.19.2 flag" in m for m in messages)
    assert not any("--recompute-granularity" in m for m in messages)  # unresolved: not judged
    assert len(messages) == 3


# ---- the model a command line describes --------------------------------------------------------

SMALL = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 1376 --swiglu "
         "--normalization RMSNorm --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 "
         "--untie-embeddings-and-output-weights --disable-bias-linear --bf16")


def test_missing_vocabulary_is_asked_for_or_read_from_the_tokenizer(tmp_path):
    text = SMALL + f" --tokenizer-model {tmp_path}/no-such-tokenizer"
    with pytest.raises(PlannerError, match=r"--vocab-size.*--set vocab_size=N"):
        job_from_script(text, gpus=8, hw="h100")
    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps({"model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(1000)}},
                               "added_tokens": [{"id": 999, "content": "t999"}, {"id": 1000, "content": "<eos>"}]}))
    sj = job_from_script(SMALL + f" --tokenizer-model {tmp_path}", gpus=8, hw="h100")
    assert sj.model.vocab_size == 1001 and sj.model_source == "built from the flags"  # len(tokenizer)
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({f"w{i}": i for i in range(500)}))
    assert job_from_script(SMALL + f" --vocab-file {vocab}", gpus=8, hw="h100").model.vocab_size == 500
    sj = job_from_script(SMALL, gpus=8, hw="h100", model_overrides={"vocab_size": 32000})
    assert sj.model.vocab_size == 32000


def test_qkv_bias_is_add_bias_linear_or_add_qkv_bias():
    """megatron/core/transformer/attention.py: linear_qkv bias=add_bias_linear or add_qkv_bias;
    add_bias_linear is on unless --disable-bias-linear."""
    def attn(flags: str):
        v = plan_from_megatron_args(SMALL.replace("--disable-bias-linear", "").split() + flags.split(), gpus=8).values
        h = model_hints(v)
        return h["attention"]["qkv_bias"], h["attention"]["output_bias"], h["ffn"]["bias"]

    assert attn("") == (True, True, True)
    assert attn("--disable-bias-linear") == (False, False, False)
    assert attn("--disable-bias-linear --add-qkv-bias") == (True, False, False)


def test_moe_layer_freq_is_evaluated_with_bounds():
    assert parse_moe_layer_freq("([0]*3+[1]*58)", 61) == [0] * 3 + [1] * 58
    assert parse_moe_layer_freq("[0]+[1]*2*3", 7) == [0] + [1] * 6
    assert parse_moe_layer_freq("([1]*3+[0]*1)*3", 12) == [1, 1, 1, 0] * 3
    assert parse_moe_layer_freq("[[0,1][1]]*2", 2) == [1, 1]
    assert parse_moe_layer_freq("2", 8) == 2
    for text, why in (("[1]*(9**9**9)", "far beyond"), ("[1]*(10**3)", "above the 61 layers"),
                      ("[1]*100000000000", "more than 10 digits"), ("[1]*61+[1]", "more than the 61 layers"),
                      ("[0]*60", "60 entries for 61 layers"), ("[2]*61", "0 (dense) or 1"),
                      ("([1],)*61", "tuple"), ("(1,)*61", "expects an integer"), ("[1]*61-1", "unexpected '-'"),
                      ("[" * 100 + "]" * 100, "nested")):
        t = time.perf_counter()
        with pytest.raises(PlannerError, match=re.escape(why)):
            parse_moe_layer_freq(text, 61)
        assert time.perf_counter() - t < 1.0


def test_hostile_moe_layer_freq_in_a_script_is_refused_quickly():
    text = ("python pretrain_gpt.py --num-layers 8 --hidden-size 512 --num-attention-heads 8 --num-experts 4 "
            "--moe-layer-freq \"[1]*(9**9**9)\" --seq-length 512 --micro-batch-size 1 --vocab-size 1000 "
            "--global-batch-size $((9**9**9)) \n")
    t = time.perf_counter()
    with pytest.raises(PlannerError, match="far beyond any layer count"):
        plan_from_megatron_args(text, gpus=8)
    assert time.perf_counter() - t < 2.0


def test_a_flag_left_empty_is_reported_not_fed_the_next_flag():
    text = "python pretrain_gpt.py --save $CKPT_DIR_EMPTY --load x --tensor-model-parallel-size 2 $EXTRA_ARGS --seq-length 8\n"
    r = plan_from_megatron_args(text.replace("$CKPT_DIR_EMPTY", ""), gpus=8)
    assert "--save (expects 1 value, the next word is --load: argparse refuses it; an empty variable?)" in r.unknown_flags
    assert r.values["load"] == "x" and r.plan.tp == 2
    assert "$EXTRA_ARGS (unresolved: whatever it holds is not read)" in r.unknown_flags
    assert r.values["seq_length"] == "8" and r.unresolved == ["$EXTRA_ARGS"]
