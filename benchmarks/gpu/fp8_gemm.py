"""FP8 GEMM rates on one Hopper GPU, by shape and by the accumulation each training GEMM uses.

Run on a machine with CUDA:  python3 -m benchmarks.gpu.fp8_gemm OUT.json

Why: planner's GEMM shape curve (planner.cost.compute.shape_factor) was fit to bf16 GEMMs only;
the five FP8 shapes of tests/fixtures/h200_kernel_rates.json already showed few-row FP8 GEMMs
slower than that curve says. And Transformer Engine's FP8 recipes on Hopper (DelayedScaling,
Float8CurrentScaling: transformer_engine/common/recipe) run the forward GEMM with fast
accumulation (use_split_accumulator=False) but the data- and weight-gradient GEMMs with the split
accumulator (FP32 promotion of partial sums, slower), gradients in E5M2 (Format.HYBRID). torchao's
rowwise recipe (torchtitan) runs cuBLAS's/CUTLASS's row-wise scaled kernel. This script times each
of those GEMM kinds through torch._scaled_mm (cuBLASLt, as Transformer Engine's general_gemm is)
beside bf16, over single-dimension sweeps (the other two dimensions large) and the GEMMs of the
published Hopper FP8 runs' models (Llama 3.1 8B/70B/405B at TP 8, Qwen3-30B-A3B and Qwen3-235B-A22B
experts, DeepSeek-V3 experts). L2 is flushed before each timed call; the median of 15 calls.
"""

from __future__ import annotations

import json
import sys

import torch

BIG = 8192
SWEEP = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


def bench(fn, iters: int = 15, warmup: int = 4) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
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


def model_shapes() -> list[tuple[int, int, int, str]]:
    """(m, n, k, what): forward shapes; each also runs as its dgrad (m, k, n) and wgrad (k, n, m)."""
    out = []
    for tokens in (4096, 8192, 16384):
        for name, n, k in [("llama8b-tp8 qkv", 768, 4096), ("llama8b-tp8 fc1", 3584, 4096),
                           ("llama8b-tp8 fc2", 4096, 1792), ("llama8b-tp8 proj", 4096, 512),
                           ("llama70b-tp8 qkv", 1280, 8192), ("llama70b-tp8 fc1", 7168, 8192),
                           ("llama70b-tp8 fc2", 8192, 3584), ("llama70b-tp8 proj", 8192, 1024),
                           ("llama405b-tp8 fc1", 13312, 16384), ("llama405b-tp8 fc2", 16384, 6656)]:
            out.append((tokens, n, k, name))
    for tokens in (256, 512, 1024, 2048, 4096):  # tokens per local expert
        for name, n, k in [("qwen3-30b expert fc1", 1536, 2048), ("qwen3-30b expert fc2", 2048, 768),
                           ("qwen3-235b expert fc1", 3072, 4096), ("qwen3-235b expert fc2", 4096, 1536),
                           ("dsv3 expert fc1", 4096, 7168), ("dsv3 expert fc2", 7168, 2048)]:
            out.append((tokens, n, k, name))
    return out


def sweep_shapes() -> list[tuple[int, int, int, str]]:
    out = [(BIG, BIG, BIG, "large")]
    for d in SWEEP:
        out += [(d, BIG, BIG, "thin m"), (BIG, d, BIG, "thin n"), (BIG, BIG, d, "thin k")]
    return out


def kinds(m: int, n: int, k: int):
    """Each GEMM kind's callable for shape (m, n, k): A is m x k row-major, B k x n column-major
    (cuBLASLt's FP8 needs the TN layout, which Transformer Engine gets by casting transposes)."""
    one = torch.tensor(1.0, device="cuda")
    a16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    a8 = a16.to(torch.float8_e4m3fn)
    b8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    a5 = a16.to(torch.float8_e5m2)
    sa, sb = torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")
    return {
        "bf16": lambda: a16 @ b16,
        "fp8_fast": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                             use_fast_accum=True),
        "fp8_split": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                              use_fast_accum=False),
        "fp8_e5m2_split": lambda: torch._scaled_mm(a5, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                   use_fast_accum=False),
        "fp8_rowwise": lambda: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                use_fast_accum=True),
    }


def main(out_path: str) -> None:
    dev = torch.cuda.get_device_properties(0)
    res = {"device": dev.name, "sms": dev.multi_processor_count, "torch": torch.__version__,
           "cuda": torch.version.cuda, "columns": "m, n, k, what, kind, TFLOPS", "rows": []}
    shapes = sweep_shapes()
    for m, n, k, what in model_shapes():
        shapes += [(m, n, k, what + " fwd"), (m, k, n, what + " dgrad"), (k, n, m, what + " wgrad")]
    seen = set()
    for m, n, k, what in shapes:
        if (m, n, k) in seen:
            continue
        seen.add((m, n, k))
        fns = kinds(m, n, k)
        for kind, fn in fns.items():
            try:
                t = bench(fn)
                row = [m, n, k, what, kind, round(2 * m * n * k / t / 1e12, 2)]
            except Exception as exc:  # noqa: BLE001 - report and go on
                row = [m, n, k, what, kind, None, str(exc)[:160]]
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
        del fns
        torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump(res, f, indent=0)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fp8_gemm.json")
