"""torchtitan-style Llama blocks eager against torch.compile on one GPU: forward-backward time of
four Llama-3-8B-shaped decoder blocks (benchmarks/gpu/op_sac_memory.py's Block) without
activation checkpointing, eager and with each block compiled (torchtitan's per-block compile).
Usage: python benchmarks/gpu/eager_vs_compiled.py OUT.json"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from op_sac_memory import HEAD_DIM, Block, run_blocks  # noqa: E402


def timed(blocks, tokens: int, repeats: int = 10) -> float:
    dev = torch.device("cuda")
    freqs = torch.polar(torch.ones(tokens, HEAD_DIM // 2, device=dev),
                        torch.randn(tokens, HEAD_DIM // 2, device=dev))[None, :, None, :]
    x = torch.randn(1, tokens, 4096, device=dev, dtype=torch.bfloat16, requires_grad=True)
    times = []
    for _ in range(repeats + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = run_blocks(blocks, x, freqs, "none")
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        for p in blocks.parameters():
            p.grad = None
        x.grad = None
    rest = sorted(times[3:])
    return rest[len(rest) // 2]


def main(path: str) -> None:
    torch.manual_seed(0)
    blocks = nn.ModuleList(Block() for _ in range(4)).cuda().bfloat16()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "layers": 4, "runs": []}
    for tokens in (4096, 8192):
        eager = timed(blocks, tokens)
        compiled_blocks = nn.ModuleList(torch.compile(b) for b in blocks)
        compiled = timed(compiled_blocks, tokens)
        r = {"tokens": tokens, "eager_s": eager, "compiled_s": compiled}
        out["runs"].append(r)
        print(json.dumps(r), flush=True)
    Path(path).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "eager_vs_compiled.json")
