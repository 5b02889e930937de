"""The schedule records (issue 44): every table a schedule used to be keyed in derives from
planner.specs.schedule.REGISTRY, and each record's facts reach the rules, search, launchers and
cost model that read them."""

from __future__ import annotations

import typing

import numpy as np
import pytest

from planner.cost.schedules import SCHEDULES as WALKED
from planner.cost.schedules import placement as walk_placement
from planner.cost.schedules.batch import BUBBLES
from planner.cost.schedules.orders import GENERATORS
from planner.launchers.torchtitan.read import MULTI_STAGE, SINGLE_STAGE, plan_schedule
from planner.launchers.torchtitan.rules import TORCHTITAN_SCHEDULES
from planner.search.space import schedule_options
from planner.specs.layout import placement_of
from planner.specs.plan import SCHEDULES, Plan, default_schedule
from planner.specs.schedule import REGISTRY, by_torchtitan_name, schedule_named, searched
from planner.specs.software import LEVER_FEATURES


def test_names_are_unique_and_plan_strings_accept_every_nameable_one():
    names = [s.name for s in REGISTRY]
    assert len(names) == len(set(names))
    assert SCHEDULES == tuple(s.name for s in REGISTRY if s.nameable)
    # Plan.schedule's Literal is spelled out for the type checker; it must list the same names
    literal = typing.get_args(typing.get_args(Plan.model_fields["schedule"].annotation)[0])
    assert literal == SCHEDULES


def test_every_kind_a_record_names_has_its_implementation_in_the_cost_model():
    for s in REGISTRY:
        assert s.order in GENERATORS, s.name
        assert s.bubble in BUBBLES or s.bubble in ("megatron", "combined"), s.name
    assert WALKED == REGISTRY  # the walk runs every record, passed as the record


def test_defaults_follow_megatron():
    assert default_schedule(1, 1) is None
    assert default_schedule(4, 1) == "1f1b" and default_schedule(4, 2) == "interleaved"


@pytest.mark.parametrize("name", [s.name for s in REGISTRY])
def test_a_record_drives_the_tables_that_used_to_name_it(name):
    s = schedule_named(name)
    assert placement_of(s) == s.placement
    assert TORCHTITAN_SCHEDULES.get(name) == s.torchtitan
    if s.torchtitan is not None:
        assert plan_schedule(s.torchtitan.upper()) == name  # matched without case, as torchtitan does
        assert by_torchtitan_name(s.torchtitan) is s
        assert s.torchtitan.lower() in (MULTI_STAGE if s.vpp[0] > 1 or s.torchtitan_min_vpp > 1 else SINGLE_STAGE)
    assert LEVER_FEATURES.get(("schedule", name)) == ((s.software_feature,) if s.software_feature else None)
    for target in ("megatron", "torchtitan", "any"):
        for vpp in (1, 2, 3):
            assert (s in schedule_options(target, 4, vpp)) == (target in s.searched_under and s.fits_vpp(vpp))
    # the walk places chunks as the record says: DualPipe's two per rank, a V's two, or the loop's vpp
    place = walk_placement(s, 4, 2, 8)
    assert all(len(place.stages_held(r)) == s.chunks(2) for r in range(4))


def test_records_say_which_vpp_and_micro_batches_they_take():
    one, inter, zb, zbv, dual, dualv = map(schedule_named, ("1f1b", "interleaved", "zb-h1", "zbv", "dualpipe", "dualpipev"))
    assert one.fits_vpp(1) and not one.fits_vpp(2) and one.vpp_text == "vpp=1"
    assert inter.fits_vpp(3) and not inter.fits_vpp(1) and inter.vpp_text == "vpp > 1"
    assert zbv.fits_vpp(2) and not zbv.fits_vpp(3) and zbv.vpp_text == "vpp=2"
    m = np.arange(1, 20)
    assert (dual.takes(4, m) == ((m % 2 == 0) & (m >= 8))).all()
    assert not dual.takes(3, 12)  # DualPipe needs an even pp
    assert (dualv.takes(4, m) == (m >= 8)).all()
    assert zb.takes(4, 8) and not zb.takes(4, 11)  # 11 is not a multiple of its 11 // 4 = 2 rounds
    assert one.takes(4, m).all() and dual.chunks(1) == 2 and zbv.chunks(2) == 2 and inter.chunks(3) == 3


def test_the_search_order_is_fixed():
    """The key table's schedule index follows this order: a new record comes after these."""
    assert [s.name for s in searched("torchtitan")][:3] == ["zb-h1", "zbv", "dualpipev"]
    assert [s.name for s in searched("any")][:4] == ["zb-h1", "zbv", "dualpipev", "dualpipe"]
    assert not any(s.searched_under for s in REGISTRY if s.megatron)


def test_an_unknown_name_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="known: 1f1b"):
        schedule_named("gpipe")
