"""What torchtitan's Llama block keeps for its backward without activation checkpointing, eager
and under torch.compile (torchtitan compiles each TransformerBlock separately), measured on one GPU
(issue 39: the no-recompute plans the search proposes for torchtitan runs).

Uses benchmarks/gpu/op_sac_memory.py's Block (Llama-3-8B shapes, written as torchtitan's llama3
model writes it) and prints, per setting and token count, the bytes the blocks keep between the
forward and the backward, per block. Pure PyTorch. Usage: python benchmarks/gpu/titan_block_memory.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from op_sac_memory import HEAD_DIM, Block  # noqa: E402


def kept_per_block(blocks, tokens: int) -> float:
    dev = torch.device("cuda")
    freqs = torch.polar(torch.ones(tokens, HEAD_DIM // 2, device=dev),
                        torch.randn(tokens, HEAD_DIM // 2, device=dev))[None, :, None, :]
    x = torch.randn(1, tokens, 4096, device=dev, dtype=torch.bfloat16, requires_grad=True)
    kept = 0
    for _ in range(3):  # the first call compiles
        torch.cuda.synchronize()
        m0 = torch.cuda.memory_allocated()
        out = x
        for blk in blocks:
            out = blk(out, freqs)
        torch.cuda.synchronize()
        kept = torch.cuda.memory_allocated() - m0
        out.backward(torch.ones_like(out))
        del out
        for p in blocks.parameters():
            p.grad = None
        x.grad = None
    return kept / len(blocks)


def main(path: str) -> None:
    torch.manual_seed(0)
    eager = nn.ModuleList(Block() for _ in range(4)).cuda().bfloat16()
    compiled = nn.ModuleList(torch.compile(b, fullgraph=True) for b in eager)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": []}
    for tokens in (4096, 8192):
        for name, blocks in (("eager", eager), ("compiled", compiled)):
            r = {"mode": name, "tokens": tokens, "kept_bytes_per_layer": kept_per_block(blocks, tokens)}
            r["kept_bytes_per_token_per_layer"] = r["kept_bytes_per_layer"] / tokens
            out["runs"].append(r)
            print(json.dumps(r), flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "titan_block_memory.json")
