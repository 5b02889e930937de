"""Measure the kernel rates the time model assumes, on one GPU (not collected by pytest).

Run on a machine with CUDA:  python3 tests/gpu/kernel_rates.py OUT.json
Measures bf16 GEMMs at the shapes the shape-efficiency model distinguishes (large, thin TP
shards, few tokens per expert, small-K weight gradients), FP8 per-tensor GEMMs, fused attention
(cuDNN / flash through PyTorch SDPA) forward and backward, and HBM streaming. Writes the raw
numbers; tests/gpu/compare_kernel_rates.py puts them next to the model's predictions.
"""

from __future__ import annotations

import json
import sys

import torch


def bench(fn, iters=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # Flush L2 between timed calls by touching a 256 MB buffer (the MAMF finder flushes too).
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(iters):
        flush.zero_()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


GEMM_SHAPES = [
    (2048, 2048, 13312),   # the MAMF reference shape
    (8192, 8192, 8192),
    (4096, 18432, 7168),   # dense FFN fc1-like
    (4096, 7168, 2304),    # TP-8 row-parallel (thin K)
    (4096, 576, 7168),     # MLA kv_down (thin N)
    (4096, 2304, 7168),    # TP-8 column shard
    (4096, 896, 7168),     # TP-16 column shard
    (8192, 768, 6144),     # thin N
    (8192, 6144, 768),     # thin K
    (1024, 4096, 7168),    # expert fc1, 1024 tokens
    (256, 4096, 7168),     # expert fc1, 256 tokens
    (128, 4096, 7168),     # expert fc1, 128 tokens
    (64, 4096, 7168),
    (7168, 4096, 128),     # expert wgrad with 128 tokens (K = tokens)
    (7168, 4096, 1024),
    (2048, 4608, 12288),   # GPT-3 175B qkv at TP 8
]


def main(out_path: str) -> None:
    dev = torch.cuda.get_device_properties(0)
    res = {"device": dev.name, "sms": dev.multi_processor_count, "torch": torch.__version__, "gemm": [], "fp8": [],
           "attention": [], "hbm": {}}
    for m, n, k in GEMM_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t = bench(lambda: a @ b)
        res["gemm"].append({"m": m, "n": n, "k": k, "tflops": 2 * m * n * k / t / 1e12})
    # Grouped: 4 local experts of 8192 tokens (DeepSeek-V3 EP64), as consecutive GEMMs.
    xs = [torch.randn(8192, 7168, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    ws = [torch.randn(7168, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    t = bench(lambda: [x @ w for x, w in zip(xs, ws)])
    res["gemm"].append({"m": 8192, "n": 4096, "k": 7168, "count": 4, "tflops": 4 * 2 * 8192 * 4096 * 7168 / t / 1e12})
    del xs, ws
    # FP8 per-tensor (torch._scaled_mm): B must be column-major.
    for m, n, k in [(8192, 8192, 8192), (4096, 18432, 7168), (1024, 9216, 14336), (128, 4096, 7168)]:
        try:
            a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
            one = torch.tensor(1.0, device="cuda")
            t = bench(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            res["fp8"].append({"m": m, "n": n, "k": k, "tflops": 2 * m * n * k / t / 1e12})
        except Exception as exc:  # noqa: BLE001 - report and go on
            res["fp8"].append({"m": m, "n": n, "k": k, "error": str(exc)[:200]})
    # Fused attention through SDPA, causal; heads x dim as in GPT/Llama (128) and MLA (192/128 via 192 padded).
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        for seq, heads, d in [(1024, 32, 128), (4096, 32, 128), (8192, 32, 128), (4096, 16, 192)]:
            b = max(1, 16384 // seq)
            try:
                q = torch.randn(b, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                kk = torch.randn_like(q, requires_grad=True)
                v = torch.randn_like(q, requires_grad=True)
                with sdpa_kernel(backend):
                    fwd = lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True)  # noqa: E731
                    t_f = bench(fwd, iters=10)
                    out = fwd()
                    g = torch.randn_like(out)
                    t_fb = bench(lambda: torch.autograd.grad(fwd(), (q, kk, v), g), iters=10)
                flops = 4 * b * heads * seq * (seq + 1) / 2 * d
                res["attention"].append({"backend": str(backend), "seq": seq, "heads": heads, "dim": d,
                                         "fwd_tflops": flops / t_f / 1e12,
                                         "bwd_tflops": 2.5 * flops / max(t_fb - t_f, 1e-9) / 1e12})
            except Exception as exc:  # noqa: BLE001
                res["attention"].append({"backend": str(backend), "seq": seq, "dim": d, "error": str(exc)[:200]})
    # HBM: device-to-device copy of 4 GB (read + write counted).
    x = torch.empty(2 * 2**30, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    t = bench(lambda: y.copy_(x), iters=10)
    res["hbm"]["copy_bytes_per_s"] = 2 * x.numel() * 2 / t
    t = bench(lambda: torch.add(x, y, out=y), iters=10)
    res["hbm"]["add_bytes_per_s"] = 3 * x.numel() * 2 / t
    json.dump(res, open(out_path, "w"), indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "kernel_rates.json")
