"""Sliding-window fused attention on Blackwell (ComputeEfficiency.flash_key_tile and
flash_window_half_keys): the window kernel computes whole 128-key tiles at its own half-rate point,
against cuDNN's measured gpt-oss window layers."""

from __future__ import annotations

import dataclasses

import pytest

from planner.cost.compute import attention_times, window_tile_keys
from planner.cost.flops import FusedAttention
from planner.cost.rates import build_rates
from planner.cost.setup import Assumptions
from planner.specs.catalog import load_hardware
from planner.specs.efficiency import load_efficiency

WINDOW = 128


def _rates(hw: str, **assumptions):
    h = load_hardware(hw)
    # One GPU: the benchmark's isolated kernel (no sustained-fraction discount).
    return build_rates(h, load_efficiency(h.generation), Assumptions(**assumptions), None, 1)


def _window_layer(seq: int, heads: int = 128, batch: int = 2) -> FusedAttention:
    # cudnn-frontend's sdpa_benchmark_training gpt_oss config: head dim 64, 128-key window.
    keys = WINDOW - WINDOW * (WINDOW - 1) / (2 * seq)
    return FusedAttention("core_attention", batch * seq, keys, heads, 64, 64, kernel_keys=keys,
                          causal_keys=(seq + 1) / 2)


# (forward, backward) ms measured at 2K/4K/8K/16K tokens (cuDNN 9.22; the CSVs named in the profiles).
MEASURED = {
    "gb200-nvl72": {2048: (0.109, 0.237), 4096: (0.210, 0.465), 8192: (0.414, 0.911), 16384: (0.822, 1.818)},
    "gb300-nvl72": {2048: (0.104, 0.227), 4096: (0.202, 0.442), 8192: (0.397, 0.862), 16384: (0.790, 1.712)},
}


@pytest.mark.parametrize("hw", sorted(MEASURED))
def test_window_layers_match_cudnns_measured_kernels(hw):
    rates = _rates(hw)
    for seq, (fwd_ms, bwd_ms) in MEASURED[hw].items():
        fwd, bwd = attention_times(_window_layer(seq), rates)
        assert fwd * 1e3 == pytest.approx(fwd_ms, rel=0.05), seq
        assert bwd * 1e3 == pytest.approx(bwd_ms, rel=0.05), seq


def test_a_128_key_window_computes_two_key_tiles():
    rates = _rates("b200")
    assert window_tile_keys(_window_layer(4096), rates) == 256.0
    # No window: the causal row, as before.
    causal = dataclasses.replace(_window_layer(4096), keys_per_query=2048.5, kernel_keys=2048.5, causal_keys=None)
    assert window_tile_keys(causal, rates) is None


def test_full_causal_layers_and_other_generations_keep_their_rows():
    # Only windowed layers take the window constants; a causal layer's time is unchanged by them.
    rates = _rates("b200")
    plain = dataclasses.replace(rates, flash_key_tile=0, flash_window_half_keys=None)
    causal = FusedAttention("core_attention", 4 * 4096, 2048.5, 64, 64, 64, kernel_keys=2048.5)
    assert attention_times(causal, rates) == attention_times(causal, plain)
    # Without them (Hopper, not measured), the window is costed on its keys as before.
    assert _rates("h100").flash_window_half_keys is None
    fwd, bwd = attention_times(_window_layer(4096), rates)
    fwd0, bwd0 = attention_times(_window_layer(4096), plain)
    assert fwd > 2 * fwd0 and bwd > 1.5 * bwd0
