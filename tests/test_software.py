"""Software profiles (issue 39): every bundled release loads, every entry names its source, the
levers a release lacks are refused with the release named, and the CLI lists and shows them."""

from __future__ import annotations

import json
import re

import pytest
from planner.cli import main
from planner.errors import PlannerError
from planner.specs.catalog import all_software, catalog_root, default_software, load_software, software_names
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
