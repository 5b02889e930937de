"""torchtitan's per-op selective activation checkpointing, measured on one GPU (issue 20: the
recompute=op setting planner models in planner.cost.activations.op_sac_terms).

Builds Llama-3-8B-shaped decoder blocks the way torchtitan's llama3 model writes them (separate
wq/wk/wv/wo and w1/w3/w2 linears without bias, RMSNorm in fp32, complex RoPE, repeat_kv before
SDPA, causal SDPA) and runs them under three settings: no checkpointing, full checkpointing
(torch.utils.checkpoint, non-reentrant) and the per-op policy of torchtitan's parallelize_llama.py
(``_save_list``: aten.mm except every second one per block, the SDPA kernels, reduce-scatter, max).
For each it prints the bytes the blocks keep between forward and backward, per block, the peak
above that during the backward, and the forward-backward time. It also measures torchtitan's loss
(cross_entropy over ``pred.float()``), eager and compiled, as a side measurement.

Pure PyTorch: no torchtitan install needed. Usage: python benchmarks/gpu/op_sac_memory.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

H, HEADS, KV_HEADS, FFN, VOCAB = 4096, 32, 8, 14336, 128256
HEAD_DIM = H // HEADS


def save_list() -> set:
    ops = {torch.ops.aten.mm.default, torch.ops.aten.max.default,
           torch.ops.aten._scaled_dot_product_efficient_attention.default,
           torch.ops.aten._scaled_dot_product_flash_attention.default}
    for name in ("_scaled_dot_product_cudnn_attention",):
        op = getattr(torch.ops.aten, name, None)
        if op is not None:
            ops.add(op.default)
    return ops


def op_sac_context():
    """torchtitan's per-op policy: save what _save_list names, except every second mm of the block."""
    saved, meta = save_list(), defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            meta[mode] += 1
        keep = func in saved and not (func == torch.ops.aten.mm.default and meta[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def rms_norm(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * w


def rope(x, freqs):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(3).type_as(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        lin = lambda i, o: nn.Linear(i, o, bias=False)  # noqa: E731
        self.wq, self.wk, self.wv = lin(H, H), lin(H, KV_HEADS * HEAD_DIM), lin(H, KV_HEADS * HEAD_DIM)
        self.wo = lin(H, H)
        self.w1, self.w3, self.w2 = lin(H, FFN), lin(H, FFN), lin(FFN, H)
        self.n1, self.n2 = nn.Parameter(torch.ones(H)), nn.Parameter(torch.ones(H))

    def forward(self, x, freqs):
        b, s, _ = x.shape
        xn = rms_norm(x, self.n1)
        q = self.wq(xn).view(b, s, HEADS, HEAD_DIM)
        k = self.wk(xn).view(b, s, KV_HEADS, HEAD_DIM)
        v = self.wv(xn).view(b, s, KV_HEADS, HEAD_DIM)
        q, k = rope(q, freqs), rope(k, freqs)
        rep = HEADS // KV_HEADS
        k = k[:, :, :, None, :].expand(b, s, KV_HEADS, rep, HEAD_DIM).reshape(b, s, HEADS, HEAD_DIM)
        v = v[:, :, :, None, :].expand(b, s, KV_HEADS, rep, HEAD_DIM).reshape(b, s, HEADS, HEAD_DIM)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = x + self.wo(o.transpose(1, 2).contiguous().view(b, s, H))
        hn = rms_norm(h, self.n2)
        return h + self.w2(F.silu(self.w1(hn)) * self.w3(hn))


def run_blocks(blocks, x, freqs, mode: str):
    out = x
    for blk in blocks:
        if mode == "none":
            out = blk(out, freqs)
        elif mode == "full":
            out = checkpoint(blk, out, freqs, use_reentrant=False, preserve_rng_state=False)
        else:
            out = checkpoint(blk, out, freqs, use_reentrant=False, preserve_rng_state=False, context_fn=op_sac_context)
    return out


def measure(blocks, tokens: int, mode: str, repeats: int = 5) -> dict:
    dev = torch.device("cuda")
    freqs = torch.polar(torch.ones(tokens, HEAD_DIM // 2, device=dev),
                        torch.randn(tokens, HEAD_DIM // 2, device=dev))[None, :, None, :]
    x = torch.randn(1, tokens, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        m0 = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        out = run_blocks(blocks, x, freqs, mode)
        torch.cuda.synchronize()
        kept = torch.cuda.memory_allocated() - m0
        fwd_peak = torch.cuda.max_memory_allocated() - m0
        torch.cuda.reset_peak_memory_stats()
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        bwd_peak = torch.cuda.max_memory_allocated() - m0
        del out
        for p in blocks.parameters():
            p.grad = None
        x.grad = None
    return {"mode": mode, "tokens": tokens, "layers": len(blocks), "kept_bytes": kept,
            "kept_bytes_per_layer": kept / len(blocks), "forward_peak_bytes": fwd_peak, "backward_peak_bytes": bwd_peak,
            "step_s_median": sorted(times[1:])[len(times[1:]) // 2]}


def measure_loss(tokens: int, compiled: bool) -> dict:
    dev = torch.device("cuda")
    w = torch.randn(VOCAB, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
    h = torch.randn(1, tokens, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (1, tokens), device=dev)

    def loss_fn(pred, lab):  # torchtitan components/loss.py cross_entropy_loss
        return F.cross_entropy(pred.flatten(0, 1).float(), lab.flatten(0, 1))

    fn = torch.compile(loss_fn) if compiled else loss_fn
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        m0 = torch.cuda.memory_allocated()
        pred = F.linear(h, w)
        loss = fn(pred, labels)
        del pred
        fwd_peak, after = torch.cuda.max_memory_allocated() - m0, torch.cuda.memory_allocated() - m0
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        bwd_peak = torch.cuda.max_memory_allocated() - m0
        w.grad = h.grad = None
    return {"tokens": tokens, "vocab": VOCAB, "compiled": compiled, "logits_bf16_bytes": 2 * tokens * VOCAB,
            "forward_peak_bytes": fwd_peak, "kept_after_loss_bytes": after, "backward_peak_bytes": bwd_peak}


def main(path: str) -> None:
    torch.manual_seed(0)
    blocks = nn.ModuleList(Block() for _ in range(4)).cuda().bfloat16()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": [], "loss": []}
    for tokens in (4096, 8192):
        for mode in ("none", "op", "full"):
            r = measure(blocks, tokens, mode)
            out["runs"].append(r)
            print(json.dumps(r), flush=True)
    for compiled in (False, True):
        try:
            r = measure_loss(8192, compiled)
        except Exception as exc:  # torch.compile may be unavailable on the machine
            r = {"compiled": compiled, "error": repr(exc)[:300]}
        out["loss"].append(r)
        print(json.dumps(r), flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "op_sac_memory.json")
