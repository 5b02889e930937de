"""planner compare: the acceptance command, JSON stability, infeasible hardware, the generated
explanations, the sweep and its batch rule, plots and errors."""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.report import compare as cmp
from planner.search import compare as search_cmp

# The acceptance command runs unrestricted (a few seconds with the vectorized tables); add limits
# here ("--fix", "tp=1") if the search ever gets slow again.
V3_LIMITS: list[str] = []


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def v3_compare():
    """The acceptance command (issue 9), as JSON and as text."""
    import contextlib
    import io

    args = ["compare", "--model", "v3", "--hw", "h100", "--hw", "nvl72", "--gpus", "1024", *V3_LIMITS]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(args + ["--json"])
    assert code == 0
    text = buf.getvalue()
    buf2 = io.StringIO()
    with contextlib.redirect_stdout(buf2):
        code2 = main(args)
    assert code2 == 0
    return json.loads(text), text, buf2.getvalue()


def test_acceptance_names_best_plans_and_changes(v3_compare):
    out, _, human = v3_compare
    names = [e["hardware"]["name"] for e in out["hardware"]]
    assert names == ["h100", "gb200-nvl72"]
    for e in out["hardware"]:
        assert e["status"] == "ok"
        s = e["summary"]
        assert s["plan_string"] == e["best"]["plan_string"]
        assert s["tokens_per_s_per_gpu"] > 0 and 0 < s["mfu"] < 1
        assert s["peak_bytes"] <= s["capacity_bytes"]
        assert s["days"] > 0 and s["gpu_hours"] > 0
        # Top-K usage counts every ranked plan once per dimension.
        assert all(sum(v.values()) == e["top_k"]["plans"] for v in e["top_k"]["dims"].values())
        assert s["plan_string"] in human
    ch = out["changes"]
    assert len(ch) == 1 and ch[0]["baseline"] == "h100" and ch[0]["hardware"] == "gb200-nvl72"
    sentences = ch[0]["sentences"]
    assert sentences[0].startswith("gb200-nvl72 runs ") and "tokens/s per GPU of h100" in sentences[0]
    assert any(s.startswith("The best plan changes") or s.startswith("Both choose the same plan") for s in sentences)
    assert "h100 → gb200-nvl72" in human
    assert out["token_budget"]["tokens"] == 14.8e12  # DeepSeek-V3's published budget


def test_speedup_is_peak_times_mfu(v3_compare):
    out, _, _ = v3_compare
    a, b = (e["summary"] for e in out["hardware"])
    speed = b["tokens_per_s_per_gpu"] / a["tokens_per_s_per_gpu"]
    assert speed == pytest.approx(b["peak_tflops"] / a["peak_tflops"] * b["mfu"] / a["mfu"], rel=1e-3)
    assert f"{speed:.2f}x" in out["changes"][0]["sentences"][0]


def test_swap_test_is_reported_both_ways(v3_compare):
    out, _, _ = v3_compare
    ch = out["changes"][0]
    if not ch["swap"]:  # the same plan wins on both: nothing to swap
        pytest.skip("same best plan on both systems")
    for key, host in (("other_plan_on_baseline", "h100"), ("baseline_plan_on_other", "gb200-nvl72")):
        sw = ch["swap"][key]
        assert sw["hardware"] == host
        assert sw["status"] in ("fits", "does_not_fit", "rule")
        if sw["status"] == "fits":
            # A plan evaluated elsewhere is never faster than that system's own best plan.
            best = next(e for e in out["hardware"] if e["hardware"]["name"] == host)["summary"]
            assert sw["summary"]["tokens_per_s_per_gpu"] <= best["tokens_per_s_per_gpu"] * (1 + 1e-6)
    assert sum(s.startswith("Why (swap test)") for s in ch["sentences"]) == 2


def test_json_is_stable_and_has_no_timings(v3_compare, capsys):
    out, text, _ = v3_compare
    assert "timings" not in out and "_timings" not in text
    assert text == json.dumps(out, indent=2, sort_keys=True) + "\n"
    code, again, _ = run_cli(capsys, "compare", "--model", "v3", "--hw", "h100", "--hw", "nvl72", "--gpus", "1024",
                             *V3_LIMITS, "--json")
    assert code == 0 and again == text


def test_a_hardware_with_nothing_that_fits_gets_its_reason(capsys):
    code, text, _ = run_cli(capsys, "compare", "--model", "llama3.1-70b", "--hw", "h100", "--hw", "gb300-nvl72",
                            "--gpus", "8", "--global-batch", "16", "--seq-len", "4096",
                            "--fix", "sharding=ddp,offload=none,pp=1", "--json")
    assert code == 0
    out = json.loads(text)
    h100, gb300 = out["hardware"]
    assert h100["status"] == "nothing_fits" and "Nothing fits" in h100["reason"] and "best" not in h100
    assert gb300["status"] == "ok"
    assert any(s.startswith("h100: nothing fits") for s in out["changes"][0]["sentences"])
    header, rows = cmp.table_rows(out)
    plan_row = next(r for r in rows if r[0] == "best plan: degrees")
    assert plan_row[1] == "nothing fits" and plan_row[2] != "nothing fits"


# ---- The explanation generator on constructed inputs (no search) -----------------------------

def _entry(name, domain, *, pp, ep, tps, mfu, peak_tflops, ep_links, ep_domains, breakdown, recompute="none",
           hbm=80 * 2**30):
    step = sum(breakdown.values())
    summary = {
        "plan_string": f"pp={pp},ep={ep},recompute={recompute}", "micro_batches": 8,
        "degrees": {"tp": 1, "cp": 1, "pp": pp, "vpp": 1, "ep": ep, "etp": 1, "dp": 64, "edp": 8, "mbs": 1},
        "levers": {"recompute": recompute, "sharding": "dist_opt", "offload": "none", "precision": "bf16",
                   "moments": "fp32"},
        "tokens_per_s_per_gpu": tps, "mfu": mfu, "peak_tflops": peak_tflops, "step_time_s": step,
        "peak_bytes": 0.9 * hbm, "capacity_bytes": hbm, "peak_fraction": 0.9, "constant_bytes": 0.5 * hbm,
        "bottleneck": "GEMM compute", "breakdown": breakdown,
        "groups": {"ep": {"size": ep, "domains": ep_domains, "links": ep_links},
                   **({"pp": {"size": pp, "domains": pp, "links": "nvlink+network"}} if pp > 1 else {})},
        "idle_gpus": 0, "days": 10.0, "gpu_hours": 1e6, "gpu_hours_with_idle": 1e6,
    }
    return {"hardware": {"name": name, "domain_size": domain, "hbm_usable_bytes": hbm}, "status": "ok",
            "summary": summary, "top_k": {"plans": 10, "dims": {"pp": {str(pp): 10}, "ep": {str(ep): 10}}}}


def test_explanations_follow_the_numbers():
    base = _entry("hopper", 8, pp=8, ep=64, tps=1000, mfu=0.40, peak_tflops=1000, ep_links="nvlink+network",
                  ep_domains=8, breakdown={"gemm": 6.0, "ep": 2.0, "pipeline_bubble": 2.0}, recompute="full")
    other = _entry("rack", 72, pp=4, ep=64, tps=3000, mfu=0.48, peak_tflops=2500, ep_links="nvlink", ep_domains=1,
                   breakdown={"gemm": 3.0, "ep": 0.2, "pipeline_bubble": 0.13}, hbm=180 * 2**30)
    other_on_base = {"status": "does_not_fit", "summary": {**other["summary"], "peak_bytes": 150 * 2**30,
                                                           "capacity_bytes": 80 * 2**30}}
    base_on_other = {"status": "fits", "summary": {**base["summary"], "tokens_per_s_per_gpu": 2000,
                                                   "breakdown": {"gemm": 3.0, "ep": 0.3, "pipeline_bubble": 1.5}}}
    job = type("J", (), {"gpus": 1024})()
    s = cmp.explain_pair(base, other, {"other_plan_on_baseline": other_on_base, "baseline_plan_on_other": base_on_other},
                         job)
    assert s[0].startswith("rack runs 3.00x the tokens/s per GPU of hopper") and "2.50x" in s[0] and "1.20x" in s[1 - 1]
    assert "PP 8 → 4" in s[1] and "recompute full → none" in s[1]
    assert "rack's plan does not fit on hopper" in s[2] and "PP 8" in s[2] and "recompute full" in s[2]
    # The slower side loses most to the bubble, not to GEMMs or the all-to-all.
    assert "hopper's plan fits on rack" in s[3] and "pipeline bubble" in s[3] and "33% below" in s[3]
    ep_line = next(x for x in s if x.startswith("EP traffic"))
    assert "span 8 NVLink domains of 8 GPUs" in ep_line and "stay inside one 72-GPU NVLink domain" in ep_line
    assert any(x.startswith("PP among the top 10 on hopper: 8 (10)") for x in s)
    # Swap the roles of the inputs: the sentences change with the numbers, not with names.
    s2 = cmp.explain_pair(other, base, {"other_plan_on_baseline": base_on_other, "baseline_plan_on_other": other_on_base},
                          job)
    assert s2[0].startswith("hopper runs 0.33x") and "PP 4 → 8" in s2[1]


def test_same_plan_says_the_hardware_alone_differs():
    a = _entry("a", 8, pp=1, ep=8, tps=1000, mfu=0.4, peak_tflops=1000, ep_links="nvlink", ep_domains=1,
               breakdown={"gemm": 1.0})
    b = _entry("b", 8, pp=1, ep=8, tps=2000, mfu=0.4, peak_tflops=2000, ep_links="nvlink", ep_domains=1,
               breakdown={"gemm": 0.5})
    s = cmp.explain_pair(a, b, {}, type("J", (), {"gpus": 8})())
    assert "Both choose the same plan" in s[1]
    assert not any(x.startswith("Why (swap test)") for x in s)


# ---- Sweep ---------------------------------------------------------------------------------

@pytest.mark.parametrize("ref, seq, gpus, expected", [
    (8192, 4096, 256, 8192),      # the reference batch already gives 128K tokens per GPU
    (8192, 4096, 16384, 8192),    # 2,048 tokens per GPU: still above the floor
    (8192, 4096, 65536, 16384),   # raised to a power of two with at least 1,024 tokens per GPU
    (2048, 8192, 16384, 2048),    # Llama 3's own run sits exactly on the floor
    (2048, 8192, 32768, 4096),
    (3840, 4096, 32768, 8192),
])
def test_sweep_batch_rule(ref, seq, gpus, expected):
    gb = search_cmp.sweep_global_batch(ref, seq, gpus)
    assert gb == expected
    assert gb * seq >= min(ref * seq, gpus * search_cmp.MIN_TOKENS_PER_GPU)


def test_sweep_runs_plots_and_states_the_rule(capsys, tmp_path):
    png = tmp_path / "sweep.png"
    # pp=1 (was pp=2): the sweep's rows, plot and rule whatever the space's size, in half the time.
    code, text, _ = run_cli(capsys, "compare", "--model", "llama3.1-8b", "--hw", "h100", "--hw", "b200",
                            "--sweep-gpus", "16,8", "--seq-len", "4096", "--max", "pp=1,cp=1", "--plot", str(png),
                            "--json")
    assert code == 0
    out = json.loads(text)
    assert out["gpus"] == [8, 16]
    assert out["global_batch_rule"] == cmp.SWEEP_BATCH_RULE
    assert len(out["rows"]) == 4 and {r["hardware"] for r in out["rows"]} == {"h100", "b200"}
    assert all(r["status"] == "ok" for r in out["rows"])
    assert out["sentences"][0].startswith("h100: ")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, human, _ = run_cli(capsys, "compare", "--model", "llama3.1-8b", "--hw", "h100", "--sweep-gpus", "8",
                             "--seq-len", "4096", "--max", "pp=1,cp=1")
    assert code == 0 and "global batch: the reference job's global batch" in human


def test_compare_plot_is_a_png(v3_compare, tmp_path):
    from planner.report.plots import plot_compare

    out, _, _ = v3_compare
    path = plot_compare(out, tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- Errors: one paragraph, non-zero exit ----------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--sweep-gpus", "256,abc"], "'abc' is not a positive GPU count"),
    (["--sweep-gpus", "256,256"], "lists a count twice"),
    (["--hw", "h100", "--hw", "h100-sxm"], "names h100 twice"),
    (["--tokens", "-5"], "must be positive"),
    (["--hw", "h1000"], "h1000"),
])
def test_errors_are_one_paragraph(capsys, args, words):
    code, _, err = run_cli(capsys, "compare", "--model", "v3", *args)
    assert code != 0
    assert words in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_token_budget_defaults():
    from planner.specs.catalog import load_model

    assert search_cmp.token_budget(load_model("llama3.1-405b"), None)["tokens"] == 15.6e12
    assert search_cmp.token_budget(load_model("llama3.1-405b"), 1e12) == {"tokens": 1e12, "source": "--tokens"}
    none = search_cmp.token_budget(load_model("mixtral-8x7b"), None)
    assert none["tokens"] == 1e12 and "no published token budget" in none["source"]


# ---- GPU counts per system, cost and the same-budget / same-time views (issue 43) ------------

COUNTS_ARGS = ["compare", "--model", "llama3.1-8b", "--hw", "h100:16", "--hw", "b200:8", "--seq-len", "4096",
               "--max", "pp=2,cp=1", "--tokens", "1e12", "--price", "h100=2.5", "--price", "hgx-b200=4"]


@pytest.fixture(scope="module")
def counts_compare():
    """One comparison at a GPU count per system (two small searches), as JSON and as text."""
    import contextlib
    import io

    texts = []
    for extra in (["--json"], []):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(COUNTS_ARGS + extra) == 0
        texts.append(buf.getvalue())
    return json.loads(texts[0]), texts[1]


def test_each_system_runs_at_its_own_count(counts_compare):
    out, human = counts_compare
    assert [(e["hardware"]["name"], e["gpus"], e["summary"]["gpus"]) for e in out["hardware"]] == \
        [("h100", 16, 16), ("b200", 8, 8)]
    for e in out["hardware"]:
        s = e["summary"]
        assert s["degrees"]["dp"] * s["degrees"]["tp"] * s["degrees"]["pp"] * s["degrees"]["cp"] == e["gpus"]
        assert s["tokens_per_s_cluster"] == pytest.approx(s["tokens_per_s_per_gpu"] * e["gpus"], rel=1e-5)
    # Different counts: no swap test (a plan's DP degree belongs to its count), and the text says so.
    assert out["changes"][0]["swap"] == {}
    assert any(x.startswith("No swap test: the two run different GPU counts (16 and 8)") for x in out["changes"][0]["sentences"])
    assert "h100 x 16, b200 x 8 GPUs" in human and "tokens/s (cluster)" in human and "Same budget" in human


def test_cost_arithmetic_from_the_per_gpu_figures(counts_compare):
    import math

    out, _ = counts_compare
    tokens = out["token_budget"]["tokens"]
    price = {"h100": 2.5, "b200": 4.0}
    for e in out["hardware"]:
        s, c = e["summary"], e["summary"]["cost"]
        p, n, held = price[e["hardware"]["name"]], e["gpus"], e["gpus"] + s["idle_gpus"]
        assert c["usd_per_gpu_hour"] == p and c["source"] == "--price" and c["estimate"] is False
        seconds = tokens / (s["tokens_per_s_per_gpu"] * n)
        assert s["days"] == pytest.approx(seconds / 86400, rel=1e-5)
        assert c["usd_per_run"] == pytest.approx(seconds * held * p / 3600, rel=1e-5)
        assert c["usd_per_million_tokens"] == pytest.approx(c["usd_per_run"] / tokens * 1e6, rel=1e-5)
    base = out["hardware"][0]["summary"]
    sb = out["views"]["same_budget"]
    assert sb["usd"] == base["cost"]["usd_per_run"]
    for r, e in zip(sb["systems"], out["hardware"]):
        s = e["summary"]
        assert r["tokens"] == pytest.approx(sb["usd"] / (s["cost"]["usd_per_million_tokens"] / 1e6), rel=1e-5)
        assert r["days"] == pytest.approx(r["tokens"] / s["tokens_per_s_cluster"] / 86400, rel=1e-5)
    assert sb["systems"][0]["fraction_of_budget"] == pytest.approx(1.0, rel=1e-5)
    st = out["views"]["same_time"]
    t = tokens / base["tokens_per_s_cluster"]
    for r, e in zip(st["systems"], out["hardware"]):
        tps = e["summary"]["tokens_per_s_per_gpu"]
        # The least whole number of GPUs that trains the budget in the baseline's time.
        assert tps * r["gpus"] * t >= tokens * (1 - 1e-5) and tps * (r["gpus"] - 1) * t < tokens
        assert r["nvlink_domains"] == math.ceil(r["gpus"] / e["hardware"]["domain_size"])


def test_economics_on_constructed_entries():
    from planner.specs.prices import Price

    def entry(name, gpus, tps, idle=0, price=None, domain=8):
        s = {"gpus": gpus, "tokens_per_s_per_gpu": tps, "tokens_per_s_cluster": tps * gpus, "idle_gpus": idle,
             "gpu_hours_with_idle": 1e12 / (tps * gpus) * (gpus + idle) / 3600}
        s["cost"] = search_cmp.cost_json(s, price)
        return {"hardware": {"name": name, "domain_size": domain}, "status": "ok", "summary": s}

    a = entry("a", 512, 2000.0, price=Price(2.0, "x", True))
    b = entry("b", 128, 6000.0, idle=16, price=Price(6.0, "x", True), domain=72)
    # b: 144 held GPUs at $6 for 768,000 tokens/s -> $0.3125 per 1M tokens; a: 512 x $2 for 1,024,000 -> $0.2778.
    assert b["summary"]["cost"]["usd_per_million_tokens"] == pytest.approx(144 * 6 / 3600 / 768000 * 1e6, rel=1e-5)
    sb = search_cmp.same_budget([a, b], 1e12)
    assert sb["systems"][1]["fraction_of_budget"] == pytest.approx((512 * 2 / 1024000) / (144 * 6 / 768000), rel=1e-5)
    st = search_cmp.same_time([a, b], 1e12)
    assert st["systems"][1]["gpus"] == 171  # 1,024,000 / 6,000 = 170.7, rounded up
    assert st["systems"][1]["nvlink_domains"] == 3
    assert search_cmp.same_budget([a, entry("c", 8, 1.0)], 1e12) is None  # only one system has a price
    assert search_cmp.cost_json(a["summary"], None) is None


@pytest.mark.parametrize("args, words", [
    (["--gpus", "512", "--gpus", "128"], "--hw h100:512 --hw nvl72:128"),
    (["--hw", "h100:abc"], "'abc' is not a positive GPU count"),
    (["--hw", "h100:0"], "must be a positive integer"),
    (["--hw", "h100:8", "--sweep-gpus", "8,16"], "--hw NAME:COUNT gives one"),
    (["--hw", "h100", "--price", "h100"], "is not NAME=USD"),
    (["--hw", "h100", "--price", "h100=-1"], "outside (0, 1,000]"),
    (["--hw", "h100", "--price", "b200=3"], "not among the compared systems"),
    (["--hw", "h100", "--price", "h100=3", "--price", "h100-sxm=4"], "a price twice"),
])
def test_count_and_price_errors_are_one_paragraph(capsys, args, words):
    code, _, err = run_cli(capsys, "compare", "--model", "v3", *args)
    assert code == 2
    assert words in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_bundled_prices_are_sourced_estimates_for_catalog_systems():
    from planner.specs.catalog import load_hardware
    from planner.specs.prices import bundled_prices

    table = bundled_prices()
    assert {"h100", "gb200-nvl72"} <= set(table)
    for name, p in table.items():
        assert load_hardware(name).name == name  # keys are catalog names, not aliases
        assert p.estimate and p.source.startswith("estimate:") and "2025" in p.source
        assert 0 < p.usd_per_gpu_hour < 100
