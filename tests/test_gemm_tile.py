"""GEMM output-tile quantization on Blackwell (ComputeEfficiency.gemm_tile): an output dimension
that is not a multiple of the 256-wide two-SM tile pays for the empty part of its last tile."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.cost.compute import gemm_times, shape_factor, tile_fill
from planner.cost.flops import Gemm
from planner.cost.rates import build_rates
from planner.cost.setup import Assumptions
from planner.specs.catalog import load_hardware
from planner.specs.efficiency import load_efficiency


def _rates(hw: str):
    h = load_hardware(hw)
    return build_rates(h, load_efficiency(h.generation), Assumptions(), None, 64)


def test_tile_fill_counts_the_empty_part_of_the_last_tile():
    # gpt-oss's hidden and expert width: 2880 = 11.25 x 256 computes 12 tiles.
    assert tile_fill(2880, 256) == pytest.approx(2880 / 3072)
    assert tile_fill(4096, 256) == 1.0
    # Under one tile the library picks a smaller tile; the smooth shape curve prices it.
    assert tile_fill(100, 256) == 1.0
    assert tile_fill(2880, 0) == 1.0
    np.testing.assert_allclose(tile_fill(np.array([2880.0, 5760.0, 7168.0]), 256), [0.9375, 5760 / 5888, 1.0])


def test_shape_factor_pays_the_tile_on_both_output_dimensions_not_on_k():
    base = shape_factor(4096, 2880, 2880, 210, 1.25)
    assert shape_factor(4096, 2880, 2880, 210, 1.25, 256) == pytest.approx(base * 0.9375)
    assert shape_factor(2880, 2880, 4096, 210, 1.25, 256) == pytest.approx(
        shape_factor(2880, 2880, 4096, 210, 1.25) * 0.9375 ** 2)
    # K is the loop, not an output dimension: a 2880-deep GEMM fills its tiles.
    assert shape_factor(4096, 4096, 2880, 210, 1.25, 256) == pytest.approx(shape_factor(4096, 4096, 2880, 210, 1.25))


@pytest.mark.parametrize("hw", ["b200", "gb200-nvl72", "b300", "gb300-nvl72"])
def test_blackwell_gemms_of_2880_wide_outputs_run_slower_by_the_tile_share(hw):
    rates = _rates(hw)
    assert rates.gemm_tile == 256
    untiled = dataclasses.replace(rates, gemm_tile=0)
    # gpt-oss's expert fc2 on EP8 (4096 tokens per expert): compute-bound, N = 2880.
    g = Gemm("experts.fc2", 4096, 2880, 2880, count=16, module="moe")
    fwd, dgrad, wgrad = gemm_times(g, False, rates)
    fwd0, dgrad0, wgrad0 = gemm_times(g, False, untiled)
    over = rates.kernel_overhead_s * 4  # the kernel gaps do not scale
    assert (fwd - over) / (fwd0 - over) == pytest.approx(1 / 0.9375, rel=1e-6)
    assert (wgrad - over) / (wgrad0 - over) == pytest.approx(1 / 0.9375 ** 2, rel=1e-6)
    # A shape of multiples of 256 (DeepSeek-V3's expert fc1) is untouched.
    d = Gemm("experts.fc1", 4096, 4096, 7168, count=8, module="moe")
    assert gemm_times(d, False, rates) == gemm_times(d, False, untiled)


def test_hopper_keeps_its_fitted_curve_alone():
    # The Hopper shape curve was fit to measured H200 GEMMs; no tile term is added on top.
    assert _rates("h100").gemm_tile == 0
