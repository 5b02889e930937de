"""Grouped expert GEMMs on one Hopper GPU, as Transformer Engine issues them, in BF16 and FP8.

Run on a machine with CUDA:  python3 -m benchmarks.gpu.grouped_gemm OUT.json

Why: planner prices a grouped GEMM of ``count`` local experts as ``count`` GEMMs one after another,
each at its own shape's rate (planner.cost.compute.gemm_efficiency), with a kernel gap per four
(GROUPED_GEMM_STREAMS). Transformer Engine's GroupedLinear (general_grouped_gemm) issues one cuBLAS
GEMM per expert round-robin over several streams (NVTE's default four compute streams), so small
experts that leave most SMs idle one at a time share the GPU. This script times, for the expert
shapes of the bundled fine-grained MoE models (Qwen3-30B-A3B, Qwen3-235B-A22B, gpt-oss-120b,
DeepSeek-V3) at 256-4096 tokens per expert, the per-expert GEMMs and torch's grouped
kernels where the build has them (torch._grouped_mm BF16, torch._scaled_grouped_mm FP8 row-wise);
one stream eager and, captured in a CUDA graph, one and four streams;
forward (fc1, fc2) and the two backward GEMMs of each, FP8 per-tensor with fast accumulation
(forward) and the split accumulator (backward), as Transformer Engine's Hopper recipes run them.
L2 flushed before each timed call; the median of 11 calls.
"""

from __future__ import annotations

import json
import sys

import torch

from benchmarks.gpu.fp8_gemm import bench

# (name, hidden, expert ffn, local experts): fc1 is gated (2 x ffn wide).
EXPERTS = [
    ("qwen3-30b-a3b ep8", 2048, 768, 16),
    ("qwen3-235b-a22b ep8", 4096, 1536, 16),
    ("gpt-oss-120b ep8", 2880, 2880, 16),
    ("deepseek-v3 ep64", 7168, 2048, 4),
]
TOKENS = (256, 512, 1024, 2048, 4096)
STREAMS = 4


def gemm_fn(m: int, n: int, k: int, count: int, kind: str, streams: int):
    """``count`` GEMMs (m x k) @ (k x n) of ``kind``, issued round-robin over ``streams`` streams."""
    one = torch.tensor(1.0, device="cuda")
    if kind == "bf16":
        a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
        b = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() for _ in range(count)]
        one_gemm = lambda i: torch.mm(a[i], b[i])  # noqa: E731
    else:
        dt = torch.float8_e5m2 if kind == "fp8_bwd" else torch.float8_e4m3fn
        a = [torch.randn(m, k, device="cuda").to(dt) for _ in range(count)]
        b = [torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t() for _ in range(count)]
        fast = kind == "fp8_fwd"
        one_gemm = lambda i: torch._scaled_mm(a[i], b[i], scale_a=one, scale_b=one,  # noqa: E731
                                              out_dtype=torch.bfloat16, use_fast_accum=fast)
    if streams == 1:
        return lambda: [one_gemm(i) for i in range(count)]
    side = [torch.cuda.Stream() for _ in range(streams)]

    def run():
        main = torch.cuda.current_stream()  # the capture's stream while a graph is captured
        ev = torch.cuda.Event()
        ev.record(main)
        for s in side:
            s.wait_event(ev)
        for i in range(count):
            with torch.cuda.stream(side[i % streams]):
                one_gemm(i)
        for s in side:
            main.wait_stream(s)
    return run


def graphed(m: int, n: int, k: int, count: int, kind: str, streams: int):
    """:func:`gemm_fn` captured in one CUDA graph and replayed: the GPU's time alone, as if the host
    issued the GEMMs at once (Transformer Engine loops over the experts in C++, a few microseconds
    each; Python's per-GEMM issue here would bound small experts by the host)."""
    fn = gemm_fn(m, n, k, count, kind, streams)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up outside the capture (cuBLAS workspaces, handles)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def torch_grouped(m: int, n: int, k: int, count: int, kind: str):
    """torch's grouped kernels over ``count`` equal groups (None where the build lacks them)."""
    offs = torch.arange(m, m * count + 1, m, device="cuda", dtype=torch.int32)
    if kind == "bf16" and hasattr(torch, "_grouped_mm"):
        a = torch.randn(m * count, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(count, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
        return lambda: torch._grouped_mm(a, b, offs=offs, out_dtype=torch.bfloat16)
    if kind == "fp8_fwd" and hasattr(torch, "_scaled_grouped_mm"):
        a = torch.randn(m * count, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(count, n, k, device="cuda").to(torch.float8_e4m3fn).transpose(-2, -1)
        sa = torch.ones(m * count, device="cuda")
        sb = torch.ones(count, n, device="cuda")
        return lambda: torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True)
    return None


def main(out_path: str) -> None:
    dev = torch.cuda.get_device_properties(0)
    res = {"device": dev.name, "sms": dev.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
           "columns": "model, tokens per expert, gemm, m, n, k, count, kind, issue, TFLOPS", "rows": []}
    for name, h, f, count in EXPERTS:
        for t in TOKENS:
            # forward fc1 (t x h)(h x 2f), fc2 (t x f)(f x h); dgrad (m, k, n); wgrad (k, n, m)
            gemms = [("fc1 fwd", t, 2 * f, h), ("fc2 fwd", t, h, f), ("fc1 dgrad", t, h, 2 * f),
                     ("fc2 dgrad", t, f, h), ("fc1 wgrad", h, 2 * f, t), ("fc2 wgrad", f, h, t)]
            for what, m, n, k in gemms:
                kinds = ("bf16", "fp8_fwd") if "fwd" in what else ("bf16", "fp8_bwd")
                for kind in kinds:
                    issues = [("1 stream", gemm_fn, (m, n, k, count, kind, 1)),
                              ("1 stream graphed", graphed, (m, n, k, count, kind, 1)),
                              (f"{STREAMS} streams graphed", graphed, (m, n, k, count, kind, STREAMS))]
                    if "wgrad" not in what:
                        issues.append(("torch grouped", torch_grouped, (m, n, k, count, kind)))
                    for issue, make, args in issues:
                        try:
                            fn = make(*args)
                            if fn is None:
                                continue
                            sec = bench(fn, iters=11, warmup=3)
                            tf = round(2 * m * n * k * count / sec / 1e12, 2)
                            row = [name, t, what, m, n, k, count, kind, issue, tf]
                        except Exception as exc:  # noqa: BLE001 - report and go on
                            row = [name, t, what, m, n, k, count, kind, issue, None, str(exc)[:160]]
                        res["rows"].append(row)
                        print(json.dumps(row), flush=True)
                    torch.cuda.empty_cache()
    with open(out_path, "w") as fh:
        json.dump(res, fh, indent=0)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "grouped_gemm.json")
