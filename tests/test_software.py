"""Software profiles (issue 39): every bundled release loads, every entry names its source, the
levers a release lacks are refused with the release named, and the CLI lists and shows them."""

from __future__ import annotations

import json
import re

import pytest
from planner.cli import main
from planner.errors import PlannerError
from planner.launchers.registry import default_software
from planner.specs.catalog import all_software, catalog_root, load_software, software_names
from planner.specs.plan import Plan
from planner.specs.software import FEATURES, LEVER_FEATURES, software_violations



def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err

REQUIRED = ("megatron-core-0.12", "megatron-core-0.13", "megatron-core-0.14", "megatron-core-0.15",
            "megatron-core-0.16", "megatron-core-0.19", "megatron-bridge-0.6", "torchtitan-0.2.2",
            "torchtitan-0.3.0")


def test_the_brief_s_releases_are_bundled():
    assert set(REQUIRED) <= set(software_names())


@pytest.mark.parametrize("name", software_names())
def test_every_profile_loads_and_every_entry_names_its_source(name):
    p = load_software(name)
    assert (catalog_root() / "software" / f"{name}.yaml").is_file()
    assert p.name == name
    for feature, entry in p.features.items():
        assert feature in FEATURES
        # A source names a file of the framework's repository and the release it was read at.
        assert re.search(r"[a-z_]+/[a-z0-9_/]+\.py", entry.source), (name, feature, entry.source)
        assert re.search(r"core_v0\.\d+\.\d|v0\.\d+\.\d|main [0-9a-f]{7}|0\.\d+\.\d", entry.source), (name, feature)
    for lever in p.default_levers.values():
        assert lever.source and re.search(r"\.py", lever.source)
    for rule in p.rules:
        assert re.search(r"\.py", rule.source), (name, rule.name)


def test_features_grow_with_megatron_core_releases():
    cores = sorted((p for p in all_software() if p.framework == "megatron-core"), key=lambda p: p.version_tuple)
    for older, newer in zip(cores, cores[1:]):
        assert set(older.features) <= set(newer.features), (older.name, newer.name)


def test_release_facts_from_the_tags():
    """Spot checks of the data against the tags read (megatron/training/arguments.py and
    transformer_config.py at core_v0.X.0)."""
    assert not load_software("megatron-core-0.13").has("ep_overlap")  # --overlap-moe-expert-parallel-comm: 0.14
    assert load_software("megatron-core-0.14").has("ep_overlap")
    assert not load_software("megatron-core-0.15").has("dispatcher_hybridep")  # moe_flex_dispatcher_backend: 0.16
    assert load_software("megatron-core-0.16").has("dispatcher_hybridep")
    assert not load_software("megatron-core-0.17").has("paged_stash")  # moe_paged_stash: 0.18
    assert load_software("megatron-core-0.19").has("paged_stash")
    assert load_software("megatron-bridge-0.6").megatron_core == "0.19.0"
    assert not load_software("torchtitan-0.3.0").has("dist_opt")


def test_defaults_are_the_newest_release_of_the_target_launcher():
    assert default_software("megatron").name == "megatron-core-0.19"
    assert default_software("torchtitan").name == "torchtitan-0.3.0"
    assert default_software("any") is None


def test_offers_and_default_levers():
    old, new = load_software("megatron-core-0.15"), load_software("megatron-core-0.19")
    assert new.offers("dispatcher", "hybridep") and not old.offers("dispatcher", "hybridep")
    assert old.offers("ep_overlap", "on") and not load_software("megatron-core-0.13").offers("ep_overlap", "wgrad")
    assert old.offers("recompute", "mla_up_proj+mlp")
    assert not load_software("megatron-core-0.13").offers("recompute", "mlp+shared_experts")
    assert old.offers("sharding", "hsdp:8") and not load_software("megatron-core-0.13").offers("sharding", "hsdp:8")
    assert not load_software("torchtitan-0.3.0").offers("sharding", "dist_opt")
    assert load_software("torchtitan-0.3.0").offers("recompute", "op")
    assert not new.offers("recompute", "op")
    assert new.offers("grad_reduce", "fp32")  # values that need nothing
    assert load_software("megatron-bridge-0.6").default_lever_values()["moments"] == "bf16"
    for (key, _value), needs in LEVER_FEATURES.items():
        assert key in Plan.model_fields and set(needs) <= set(FEATURES)


def test_a_lever_the_release_lacks_is_refused_with_the_version():
    plan = Plan.parse("tp=1,pp=1,ep=8,dispatcher=hybridep")
    found = software_violations(plan, load_software("megatron-core-0.15"))
    assert [v.rule for v in found] == ["software-lever"]
    assert "megatron-core 0.15.0" in found[0].message and "first in megatron-core 0.16.0" in found[0].message
    assert software_violations(plan, load_software("megatron-core-0.16")) == []


def test_unknown_profile_and_bad_file(tmp_path):
    with pytest.raises(PlannerError, match="Unknown software profile 'mcore-0.2'.*megatron-core"):
        load_software("mcore-0.2")
    bad = tmp_path / "p.yaml"
    bad.write_text("name: x\nframework: megatron-core\nversion: '1.x'\nlauncher: megatron\nsource: somewhere here\n"
                   "features: {warp_drive: {source: 'nowhere at all'}}\n")
    with pytest.raises(PlannerError, match="version.*not a release number|warp_drive"):
        load_software(str(bad))


@pytest.mark.parametrize(("asked", "used", "side"), [
    ("megatron-core-0.20", "megatron-core-0.19", "newer release"),
    ("mcore-0.21.3", "megatron-core-0.19", "newer release"),
    ("megatron-core-0.16.1", "megatron-core-0.16", "patch release"),
    ("megatron-bridge-0.7", "megatron-bridge-0.6", "newer release"),
    ("torchtitan-0.2.0", "torchtitan-0.1.0", "newer release"),
    ("torchtitan-0.4", "torchtitan-0.3.0", "newer release"),
])
def test_a_release_planner_lacks_runs_on_the_nearest_older_one_said_so(asked, used, side):
    p = load_software(asked)
    assert p.name == used and p.stands_for == asked
    assert asked in p.stand_in_note and used in p.stand_in_note and side in p.stand_in_note
    assert load_software("megatron-core-0.16.0").stands_for is None  # the release itself, by its full number


def test_a_release_older_than_planner_knows_is_refused_not_stood_in_for():
    # A newer profile would offer levers the older release lacks, and a search would credit them.
    for asked in ("megatron-core-0.11", "megatron-bridge-0.3.1", "torchtitan-0.0.9"):
        with pytest.raises(PlannerError, match=f"Unknown software profile '{asked}'"):
            load_software(asked)


def test_validate_and_search_name_the_stand_in(capsys, tmp_path):
    from planner.validate.evaluate import run_software
    from planner.validate.runs import RunSpec

    run = RunSpec.model_construct(software_profile="megatron-core-0.20", software=None, plan=None)
    profile, origin = run_software(run)
    assert profile.name == "megatron-core-0.19" and origin.startswith("the runs file; planner has no profile of")
    code, out, err = _run(capsys, "search", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--max",
                          "pp=1,cp=1,tp=1", "--top", "1", "--software", "megatron-core-0.20", "--json")
    assert code == 0, err
    sw = json.loads(out)["software"]
    assert sw["name"] == "megatron-core-0.19" and "megatron-core-0.20" in sw["origin"]


def test_software_commands(capsys):
    code, out, err = _run(capsys, "software", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert {row["name"] for row in data["software"]} == set(software_names())
    assert data["defaults"] == {"megatron": "megatron-core-0.19", "torchtitan": "torchtitan-0.3.0"}
    code, out, err = _run(capsys, "show-software", "bridge-0.6", "--json")
    assert code == 0, err
    assert json.loads(out)["software"]["name"] == "megatron-bridge-0.6"
    code, out, err = _run(capsys, "show-software", "megatron-core-0.14")
    assert code == 0 and "overlap" in out
    code, out, err = _run(capsys, "show-software", "nope")
    assert code == 2 and "Unknown software profile" in err


# ---- the option on the commands, saved searches, exports, check, validate ---------------------
QWEN = ["--model", "qwen3-235b-a22b", "--hw", "h100", "--gpus", "512", "--global-batch", "1024"]
QWEN_PLAN = "tp=2,pp=8,vpp=4,ep=32,layout=Ett|(ttt|)*30ttL"


def test_the_option_is_on_every_command_the_brief_names():
    surface = json.loads((catalog_root() / "tests" / "data" / "cli_surface.json").read_text())
    text = json.dumps(surface)
    for command in ("search", "explain", "compare", "export", "check", "validate"):
        assert command in text
    from planner.cli import _register, app
    import typer.main

    _register()
    group = typer.main.get_command(app)
    for command in ("search", "explain", "compare", "export", "check", "validate"):
        options = {o for p in group.commands[command].params for o in p.opts}
        assert "--software" in options, command


def test_a_plan_lever_the_release_lacks_is_refused_by_check_and_export(capsys):
    plan = QWEN_PLAN + ",dispatcher=hybridep"
    code, out, err = _run(capsys, "check", *QWEN, "--plan", plan, "--software", "megatron-core-0.15", "--json")
    report = json.loads(out)
    assert code == 1 and report["status"] == "FAIL"
    lever = [v for v in report["violations"] if v["rule"] == "software-lever"]
    assert lever and "megatron-core 0.15.0" in lever[0]["message"] and "megatron-core 0.16.0" in lever[0]["message"]
    code, out, err = _run(capsys, "check", *QWEN, "--plan", plan, "--software", "megatron-core-0.16", "--json")
    assert not [v for v in json.loads(out)["violations"] if v["rule"].startswith("software")]
    code, out, err = _run(capsys, "export", *QWEN, "--plan", plan, "--software", "megatron-core-0.15")
    assert code != 0 and "software-lever" in err and "0.16.0" in err


def test_a_release_of_another_launcher_is_refused(capsys):
    code, out, err = _run(capsys, "check", *QWEN, "--plan", QWEN_PLAN, "--software", "torchtitan-0.3.0")
    assert code == 2 and "torchtitan release" in err and "--target megatron" in err


def test_an_export_records_its_release_and_check_reads_it_back(capsys, tmp_path):
    path = tmp_path / "q.sh"
    code, _, err = _run(capsys, "export", *QWEN, "--plan", QWEN_PLAN + ",dispatcher=alltoall", "--software",
                        "megatron-core-0.14", "--out", str(path))
    assert code == 0, err
    assert "# software: megatron-core-0.14 (megatron-core 0.14.0)" in path.read_text().splitlines()[:6]
    code, out, err = _run(capsys, "check", "--megatron-args", str(path), "--json")
    report = json.loads(out)
    assert report["software"]["name"] == "megatron-core-0.14"
    assert report["provenance"]["software"] == "megatron-core-0.14 (the launch's planner export header)"
    # JSON is no launcher's format: it names a release only when one is given.
    code, out, _ = _run(capsys, "export", *QWEN, "--plan", QWEN_PLAN, "--format", "json")
    assert "software" not in json.loads(out)
    code, out, _ = _run(capsys, "export", *QWEN, "--plan", QWEN_PLAN, "--format", "json", "--software", "bridge-0.6")
    assert json.loads(out)["software"]["name"] == "megatron-bridge-0.6"


def test_check_says_what_it_assumed_and_dates_the_launch_flags(capsys, tmp_path):
    code, out, err = _run(capsys, "check", *QWEN, "--plan", QWEN_PLAN, "--json")
    prov = json.loads(out)["provenance"]["software"]
    assert prov.startswith("megatron-core-0.19 (assumed: the newest megatron-core release")
    code, out, err = _run(capsys, "check", *QWEN, "--plan", QWEN_PLAN)
    assert "software megatron-core-0.19 (assumed" in out
    # A launch without planner's header: its flags that exist only from some release on are dated,
    # and a --software release without them is refused.
    path = tmp_path / "q.sh"
    _run(capsys, "export", *QWEN, "--plan", QWEN_PLAN + ",dispatcher=hybridep,ep_overlap=on", "--out", str(path))
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("# software:"))
    path.write_text(text)
    code, out, err = _run(capsys, "check", "--megatron-args", str(path), "--json")
    report = json.loads(out)
    dated = report["software"]["launch_flags_dated"]
    assert "--overlap-moe-expert-parallel-comm (from megatron-core 0.14.0)" in dated
    assert "launch_flags_dated" in report["provenance"]["software"]
    code, out, err = _run(capsys, "check", "--megatron-args", str(path), "--software", "megatron-core-0.13", "--json")
    rules = {v["rule"] for v in json.loads(out)["violations"]}
    assert code == 1 and {"software-flag", "software-lever"} <= rules


def test_check_takes_the_release_of_bridge_and_torchtitan_launches(capsys, tmp_path):
    path = tmp_path / "b.sh"
    code, _, err = _run(capsys, "export", *QWEN, "--plan", QWEN_PLAN, "--format", "bridge", "--out", str(path))
    assert code == 0, err
    code, out, err = _run(capsys, "check", "--bridge", str(path), "--json")
    assert json.loads(out)["software"]["name"] == "megatron-bridge-0.6"
    toml = tmp_path / "t.toml"
    code, _, err = _run(capsys, "export", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch",
                        "32", "--plan", "tp=1,sharding=fsdp", "--format", "torchtitan-toml", "--out", str(toml))
    assert code == 0, err
    assert "# software: torchtitan-0.2.2" in toml.read_text()
    code, out, err = _run(capsys, "check", "--torchtitan", str(toml), "--json")
    assert json.loads(out)["software"]["name"] == "torchtitan-0.2.2"
    code, out, err = _run(capsys, "export", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch",
                          "32", "--plan", "tp=1,sharding=fsdp", "--format", "torchtitan-toml", "--software",
                          "torchtitan-0.3.0")
    assert code == 2 and "no longer reads" in err


def test_search_offers_only_the_release_s_levers_and_saves_it(capsys, tmp_path):
    from planner.errors import PlannerError as _PE
    from planner.search.space import Limits, software_levers

    levers = {"dispatcher": ("deepep", "alltoall", "hybridep"), "ep_overlap": ("off", "on")}
    kept = software_levers(levers, load_software("megatron-core-0.13"), Limits())
    assert kept == {"dispatcher": ("deepep", "alltoall"), "ep_overlap": ("off",)}
    with pytest.raises(_PE, match="--fix dispatcher=hybridep.*megatron-core 0.15.0.*first in megatron-core 0.16.0"):
        software_levers({"dispatcher": ("hybridep",)}, load_software("megatron-core-0.15"), Limits())
    saved = tmp_path / "s.json"
    code, out, err = _run(capsys, "search", "--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch",
                          "32", "--top", "1", "--time-limit", "10", "--software", "megatron-core-0.16", "--save",
                          str(saved), "--json")
    assert code == 0, err
    assert json.loads(saved.read_text())["software"]["name"] == "megatron-core-0.16"
    code, out, err = _run(capsys, "export", "--from", str(saved), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["software"]["name"] == "megatron-core-0.16"
    code, out, err = _run(capsys, "explain", "--from", str(saved), "--json")
    assert json.loads(out)["software"]["origin"] == "the saved search"


def test_validate_uses_each_run_s_release(capsys):
    from planner.validate.evaluate import run_software
    from tests._published import published_runs

    runs = {r.name: r for r in published_runs()}
    stated = runs["mb2606-deepseek-v3-b300-fp8mx-256gpu"]
    assert run_software(stated)[0].name == stated.software_profile == "megatron-core-0.18"
    # a development build after core_v0.15.0 that ran HybridEP: bounded by the first release with it
    guide = runs["mcg-dsv3-gb200-mxfp8-step01"]
    assert run_software(guide)[0].name == guide.software_profile == "megatron-core-0.16"
    other = runs["llama3-405b-8k-h100-8192gpu"]  # Meta's own stack: no release, the default (said so)
    profile, origin = run_software(other)
    assert profile.name == "megatron-core-0.19" and origin.startswith("default")
    assert run_software(other, "megatron-core-0.16")[0].name == "megatron-core-0.16"
    code, out, err = _run(capsys, "validate", str(catalog_root() / "tests" / "data" / "published_runs.yaml"),
                          "--only", stated.name, "--only", guide.name, "--only", other.name, "--json")
    report = json.loads(out)
    by_name = {r["name"]: r for r in report["runs"]}
    assert by_name[stated.name]["software"] == {"profile": "megatron-core-0.18", "origin": "the runs file"}
    assert by_name[guide.name]["software"] == {"profile": "megatron-core-0.16", "origin": "the runs file"}
    assert by_name[other.name]["software"]["origin"].startswith("default")
    assert report["software"]["stated"] == {"megatron-core-0.18": 1, "megatron-core-0.16": 1}


def test_flags_an_older_release_does_not_parse_are_refused(capsys, tmp_path):
    """--use-megatron-fsdp arrived in megatron-core 0.14 (--use-custom-fsdp before: arguments.py at
    core_v0.13.0 and core_v0.14.0): planner's writer writes the new flag, so a 0.13 export of an
    FSDP plan is refused, and check finds the flag in a launch said to run on 0.13."""
    assert "--use-megatron-fsdp" in load_software("megatron-core-0.13").flags_absent.flags
    assert "--use-megatron-fsdp" not in load_software("megatron-core-0.14").flags_absent.flags
    assert load_software("megatron-core-0.19").flags_absent is None
    llama = ["--model", "llama3.1-8b", "--hw", "h100", "--gpus", "8", "--global-batch", "32", "--plan", "sharding=fsdp"]
    code, out, err = _run(capsys, "export", *llama, "--software", "megatron-core-0.13")
    assert code == 2 and "--use-megatron-fsdp" in err and "software-flag" in err
    path = tmp_path / "l.sh"
    code, out, err = _run(capsys, "export", *llama, "--software", "megatron-core-0.14", "--out", str(path))
    assert code == 0, err
    code, out, err = _run(capsys, "check", "--megatron-args", str(path), "--software", "megatron-core-0.13", "--json")
    flagged = [v["message"] for v in json.loads(out)["violations"] if v["rule"] == "software-flag"]
    assert code == 1 and flagged and "--use-megatron-fsdp" in flagged[0]
