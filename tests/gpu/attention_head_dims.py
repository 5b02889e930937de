"""Fused attention forward and backward rates across head dims, on one GPU (not collected by pytest).

Run on a machine with CUDA:  python3 tests/gpu/attention_head_dims.py OUT.json
PyTorch SDPA, causal, bf16, one kernel backend at a time (cuDNN, flash), head dims 64 to 256 at a
constant width of 4,096 (heads x head dim) and 16,384 tokens per call, sequences 4K and 8K. Tests
the time model's head-dim term (planner.cost.compute.exp_share_factor): the softmax
exponentials against its matmul FLOPs. Writes the raw numbers; tests/fixtures/h200_attention_head_dims.json
holds one H200's.
"""

from __future__ import annotations

import json
import sys

import torch
from kernel_rates import bench  # tests/gpu/kernel_rates.py: median of timed calls, L2 flushed before each


def main(out_path: str) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = torch.cuda.get_device_properties(0)
    res = {"device": dev.name, "sms": dev.multi_processor_count, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "columns": "backend, seq, heads, head dim, fwd TFLOPS, bwd TFLOPS "
           "(causal: 2 x 2 x seq x (seq + 1) / 2 x dim FLOPs per head forward, backward counted as 2.5x)", "rows": []}
    for backend, name in ((SDPBackend.CUDNN_ATTENTION, "cudnn"), (SDPBackend.FLASH_ATTENTION, "flash")):
        for seq in (4096, 8192):
            for d in (64, 96, 128, 192, 256):
                heads, b = 4096 // d, 16384 // seq
                try:
                    q, k, v = (torch.randn(b, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                               for _ in range(3))
                    g = torch.randn(b, heads, seq, d, device="cuda", dtype=torch.bfloat16)

                    def fwd():
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

                    def fwd_bwd():
                        out = fwd()
                        out.backward(g)
                        q.grad = k.grad = v.grad = None

                    with sdpa_kernel([backend]):
                        with torch.no_grad():
                            tf = bench(fwd, iters=10, warmup=3)
                        tfb = bench(fwd_bwd, iters=10, warmup=3)
                    flops = 4 * b * heads * seq * (seq + 1) / 2 * d
                    res["rows"].append([name, seq, heads, d, round(flops / tf / 1e12, 1),
                                        round(2.5 * flops / (tfb - tf) / 1e12, 1)])
                    print(res["rows"][-1], flush=True)
                except Exception as exc:  # a backend without this head dim
                    res["rows"].append([name, seq, heads, d, None, None, str(exc)[:160]])
                    print(name, seq, d, "error", str(exc)[:160], flush=True)
                finally:
                    q = k = v = g = None
                    torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
