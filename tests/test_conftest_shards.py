"""The slow step's split into shards (tests/conftest.py, .ci/run): every test in exactly one shard,
the shards' measured times balanced."""

import pytest
from conftest import MARKED_SLOW_S, SLOW_TESTS, parse_shard, shard_of, measured_seconds


def test_every_test_lands_in_exactly_one_shard_and_the_split_is_balanced():
    ids = sorted(SLOW_TESTS) + sorted(MARKED_SLOW_S) + ["tests/test_x.py::unknown[a]", "tests/test_x.py::unknown[b]"]
    groups = {n: (n.split("::")[0] if "test_validate_search" in n else n) for n in ids}
    shard = shard_of(groups, 2)
    assert set(shard) == set(ids) and set(shard.values()) == {0, 1}
    load = [sum(measured_seconds(n) for n in ids if shard[n] == k) for k in (0, 1)]
    per_group = {g: sum(measured_seconds(n) for n in ids if groups[n] == g) for g in set(groups.values())}
    # greedy longest-first over groups: the shards differ by at most the longest group
    assert abs(load[0] - load[1]) <= max(per_group.values())
    for g in per_group:  # a group's tests share a fixture: one shard each
        assert len({shard[n] for n in ids if groups[n] == g}) == 1
    assert shard_of(dict(reversed(list(groups.items()))), 2) == shard  # the order of collection does not matter


def test_one_shard_keeps_everything():
    assert set(shard_of({"a": "a", "b": "b", "c": "c"}, 1).values()) == {0}


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_malformed_shard_is_a_usage_error(text):
    with pytest.raises(pytest.UsageError, match="expected i/n"):
        parse_shard(text)


def test_a_shard_parses():
    assert parse_shard("2/2") == (1, 2)
