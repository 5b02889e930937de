"""The micro-benchmarks behind `planner calibrate` (PyTorch; CUDA for real numbers).

Timing follows the device notes: warm up first, time with CUDA events around a loop, take the
median of several repetitions, rotate among input sets larger than the L2 cache for small GEMMs,
never time on zeros. ``device="cpu"`` runs the same code with tiny shapes (tests only; the numbers
mean nothing).
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
import subprocess
import time
from dataclasses import dataclass, field

# Shapes the time model asks about: GEMMs of dense layers sharded by TP (thin N or K) and of
# experts at small per-expert token counts. (N, K) pairs: hidden sizes 2048-8192 and FFN widths,
# divided by TP 1, 2, 4, 8; DeepSeek-V3-like expert shapes (h 7168, expert width 2048).
M_VALUES = (256, 512, 1024, 2048, 4096, 8192, 16384)
NK_PAIRS = (
    (4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336),  # Llama-8B layer, TP 1
    (3072, 4096), (7168, 4096), (4096, 3584),  # TP 2 / 4 shards of it
    (1024, 4096), (4096, 1792), (1536, 8192), (8192, 1024), (7168, 8192), (8192, 3584),  # TP 8 shards, h 8192
    (4096, 7168), (7168, 2048), (7168, 7168),  # DeepSeek-V3 expert FC1 (2x2048) / FC2, MLA-ish projection
)
ATTN_HEAD_DIMS = (64, 128, 192)
ATTN_SEQS = (2048, 4096, 8192, 16384)
ATTN_TOKENS = 32768
"""batch * seq per attention measurement: enough work to fill the GPU at every length."""
ATTN_WIDTH = 4096
"""heads * head_dim."""


@dataclass
class Options:
    device: str = "cuda"
    m_values: tuple[int, ...] = M_VALUES
    nk_pairs: tuple[tuple[int, int], ...] = NK_PAIRS
    fp8: bool = True
    attn_head_dims: tuple[int, ...] = ATTN_HEAD_DIMS
    attn_seqs: tuple[int, ...] = ATTN_SEQS
    attn_tokens: int = ATTN_TOKENS
    attn_width: int = ATTN_WIDTH
    copy_bytes: tuple[int, ...] = (256 << 20, 1 << 30, 4 << 30)
    target_s: float = 0.02
    """Time each repetition runs for (calls per repetition are sized to it)."""
    reps: int = 5
    log: object = None
    errors: list = field(default_factory=list)

    def say(self, msg: str) -> None:
        if self.log:
            self.log(msg)


def tiny_options() -> Options:
    """Shapes small enough for a CPU test."""
    return Options(device="cpu", m_values=(16, 32), nk_pairs=((32, 64), (64, 32)), fp8=False,
                   attn_head_dims=(16,), attn_seqs=(32,), attn_tokens=64, attn_width=64,
                   copy_bytes=(1 << 16,), target_s=0.001, reps=2)


def _timer(opts: Options, fn, flops_hint: float | None = None) -> float:
    """Median seconds of one call of ``fn``."""
    import torch

    cuda = opts.device == "cuda"
    fn()  # warm-up (kernel selection, handles)
    if cuda:
        torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    est = max(time.perf_counter() - t, 1e-7)
    calls = max(1, min(10000, int(opts.target_s / est)))
    samples = []
    for _ in range(opts.reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(calls):
                fn()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) / 1e3 / calls)
        else:
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - t) / calls)
    return statistics.median(samples)


def device_info(opts: Options) -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    if opts.device == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, capability=(p.major, p.minor), sm_count=p.multi_processor_count,
                    total_memory_bytes=p.total_memory)
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            info["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
        except Exception:
            info["driver"] = None
    else:
        info.update(name="cpu", capability=(0, 0), sm_count=0, total_memory_bytes=0)
    return info


def _inputs(opts: Options, m: int, n: int, k: int, dtype) -> list:
    """Enough (A, B) sets that one pass over them exceeds the L2 cache (60 MB on an H200)."""
    import torch

    per_set = (m * k + k * n) * 2
    sets = 1 if opts.device != "cuda" else max(1, min(8, math.ceil(200e6 / per_set)))
    out = []
    for _ in range(sets):
        a = torch.randn(m, k, device=opts.device, dtype=torch.bfloat16)
        b = torch.randn(n, k, device=opts.device, dtype=torch.bfloat16)
        out.append((a, b))
    return out


def gemm_rows(opts: Options) -> list[dict]:
    """bf16 (torch.matmul, A[m,k] @ B[k,n] with B stored [n,k] as Megatron's weights) and FP8
    (torch._scaled_mm, e4m3 operands, per-tensor fp32 scales, bf16 output) over the shape grid."""
    import torch

    rows = []
    fp8_ok = opts.fp8 and opts.device == "cuda" and hasattr(torch, "_scaled_mm")
    for n, k in opts.nk_pairs:
        for m in opts.m_values:
            sets = _inputs(opts, m, n, k, torch.bfloat16)
            i = [0]

            def bf16():
                a, b = sets[i[0] % len(sets)]
                i[0] += 1
                return a @ b.t()

            s = _timer(opts, bf16)
            rows.append({"dtype": "bf16", "m": m, "n": n, "k": k, "seconds": s, "tflops": 2 * m * n * k / s / 1e12})
            if fp8_ok:
                try:
                    f8 = [(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)) for a, b in sets]
                    one = torch.ones((), device=opts.device, dtype=torch.float32)

                    def fp8():
                        a, b = f8[i[0] % len(f8)]
                        i[0] += 1
                        # torch's default accumulation, no fast accumulation (the split accumulator):
                        # planner.cost.rates._calibrate reads these rows so.
                        return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

                    s = _timer(opts, fp8)
                    rows.append({"dtype": "fp8_tensorwise", "m": m, "n": n, "k": k, "seconds": s,
                                 "tflops": 2 * m * n * k / s / 1e12})
                except Exception as exc:  # unsupported shape or build: record once, stop FP8
                    opts.errors.append(f"fp8 GEMM {m}x{n}x{k}: {exc!r}"[:300])
                    fp8_ok = False
                del f8
            del sets
        opts.say(f"gemm n={n} k={k}: " + ", ".join(f"{r['tflops']:.0f}" for r in rows[-len(opts.m_values) * (2 if fp8_ok else 1):]))
    return rows


def copy_rows(opts: Options) -> list[dict]:
    """Device-to-device copy; bandwidth counts bytes read plus bytes written."""
    import torch

    rows = []
    for nbytes in opts.copy_bytes:
        src = torch.randn(nbytes // 2, device=opts.device, dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        s = _timer(opts, lambda: dst.copy_(src))
        rows.append({"bytes": nbytes, "seconds": s, "bandwidth": 2 * nbytes / s})
        del src, dst
    opts.say("copy: " + ", ".join(f"{r['bytes'] >> 20} MiB {r['bandwidth'] / 1e12:.2f} TB/s" for r in rows))
    return rows


def attention_rows(opts: Options) -> list[dict]:
    """torch scaled_dot_product_attention, causal, bf16, [b, heads, s, d], per backend."""
    import torch
    import torch.nn.functional as F

    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:  # pragma: no cover
        opts.errors.append(f"attention: {exc!r}")
        return []
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    if opts.device != "cuda":
        backends = [("math", SDPBackend.MATH)]
    rows = []
    for d in opts.attn_head_dims:
        heads = max(1, opts.attn_width // d)
        for s_len in opts.attn_seqs:
            b = max(1, opts.attn_tokens // s_len)
            q, k, v = (torch.randn(b, heads, s_len, d, device=opts.device, dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            g = torch.randn(b, heads, s_len, d, device=opts.device, dtype=torch.bfloat16)
            flops = 4 * b * heads * s_len * s_len * d / 2
            for name, be in backends:
                try:
                    with sdpa_kernel([be]):
                        def fwd():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                        def fwd_bwd():
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            out.backward(g)
                            q.grad = k.grad = v.grad = None

                        with torch.no_grad():
                            tf = _timer(opts, fwd)
                        tfb = _timer(opts, fwd_bwd)
                    rows.append({"backend": name, "batch": b, "heads": heads, "seq": s_len, "head_dim": d,
                                 "causal": True, "fwd_s": tf, "fwd_bwd_s": tfb, "fwd_tflops": flops / tf / 1e12,
                                 "bwd_tflops": 2.5 * flops / max(tfb - tf, 1e-9) / 1e12})
                except Exception as exc:
                    opts.errors.append(f"attention {name} d={d} s={s_len}: {exc!r}"[:300])
            del q, k, v, g
        opts.say(f"attention d={d}: " + ", ".join(f"{r['backend']}@{r['seq']} {r['fwd_tflops']:.0f}/{r['bwd_tflops']:.0f}"
                                                 for r in rows if r["head_dim"] == d))
    return rows


def kernel_overhead(opts: Options) -> float:
    """Seconds per tiny kernel launched back to back (launch gap plus the smallest kernel)."""
    import torch

    x = torch.randn(1024, device=opts.device)

    def loop():
        for _ in range(100):
            x.add_(1e-7)

    return _timer(opts, loop) / 100


def run(opts: Options) -> dict:
    """Every section; a failing section is recorded in ``errors`` and the rest still run."""
    raw: dict = {"schema_version": 1, "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                 "device": device_info(opts)}
    for key, fn in (("copy_rows", copy_rows), ("kernel_overhead_s", kernel_overhead),
                    ("gemm", gemm_rows), ("attention", attention_rows)):
        try:
            raw[key] = fn(opts)
        except Exception as exc:
            opts.errors.append(f"{key}: {exc!r}"[:300])
    raw["errors"] = list(opts.errors)
    return raw


def summarize(raw: dict, hardware: str, planner_version: str) -> dict:
    """The time model's calibration (``Calibration`` fields) from the raw tables."""
    dev = raw["device"]
    recipe = {"bf16": "bf16", "fp8_tensorwise": "tensorwise"}
    out: dict = {
        "hardware": hardware,
        "source": (f"planner {planner_version} calibrate, {raw['date']}: {dev['name']}, torch {dev['torch']}, "
                   f"CUDA {dev['cuda']}, cuDNN {dev['cudnn']}, driver {dev.get('driver')}; GEMMs torch.matmul (bf16) "
                   f"and torch._scaled_mm (FP8 e4m3, per-tensor scales); attention torch SDPA causal bf16"),
        "gemm": [{"recipe": recipe[r["dtype"]], "m": r["m"], "n": r["n"], "k": r["k"], "tflops": float(f"{r['tflops']:.4g}")}
                 for r in raw.get("gemm", []) if r["tflops"] > 0],
    }
    copies = raw.get("copy_rows") or []
    if copies:
        out["hbm_bandwidth"] = max(r["bandwidth"] for r in copies)
    att = [r for r in raw.get("attention", []) if r["head_dim"] == 128] or raw.get("attention", [])
    if att:
        longest = max(r["seq"] for r in att)
        best = max((r for r in att if r["seq"] == longest), key=lambda r: r["fwd_tflops"] + r["bwd_tflops"])
        out["attention"] = {"fwd_tflops": float(f"{best['fwd_tflops']:.4g}"), "bwd_tflops": float(f"{best['bwd_tflops']:.4g}"),
                            "keys_per_query": max(1, best["seq"] // 2)}
    if raw.get("kernel_overhead_s"):
        out["kernel_overhead_s"] = raw["kernel_overhead_s"]
    return out
