"""torchtitan's loss with and without torch's loss_parallel() (torchtitan with TP > 1), eager and
compiled: the allocated bytes the loss adds in its forward, keeps for the backward and adds in the
backward, per logit. One GPU: the logits are a DTensor sharded on the vocabulary over a one-rank
mesh, which runs DTensor's loss-parallel decomposition (torch/distributed/tensor/parallel/loss.py)
as a TP rank does, without the (scalar-sized) all-reduces' peers. Sizes: one TP-8 rank of Llama 3.1
(128,256 / 8 = 16,032 logits a token). Run: python3 benchmarks/gpu/loss_parallel_memory.py OUT.json"""
import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import loss_parallel

V, H, T = 16032, 8192, 32768


def loss_fn(pred, labels):  # torchtitan train.py loss_fn (2024-12) / components/loss.py cross_entropy_loss
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def main(path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511", RANK="0", WORLD_SIZE="1")
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    mesh = init_device_mesh("cuda", (1,))
    w = torch.randn(V, H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    h = torch.randn(1, T, H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (1, T), device="cuda")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tokens": T, "logits_per_token": V,
           "runs": []}
    for parallel in (False, True):
        for compiled in (False, True):
            fn = torch.compile(loss_fn) if compiled else loss_fn
            try:
                for _ in range(2):  # the second pass is the one kept (compile and warm-up in the first)
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    m0 = torch.cuda.memory_allocated()
                    with loss_parallel() if parallel else contextlib.nullcontext():
                        pred = F.linear(h, w)
                        if parallel:
                            pred = DTensor.from_local(pred, mesh, [Shard(2)])
                        loss = fn(pred, labels)
                        del pred
                        fwd, kept = torch.cuda.max_memory_allocated() - m0, torch.cuda.memory_allocated() - m0
                        torch.cuda.reset_peak_memory_stats()
                        loss.backward()
                        torch.cuda.synchronize()
                    bwd = torch.cuda.max_memory_allocated() - m0
                    w.grad = h.grad = None
                r = {"parallel": parallel, "compiled": compiled, "forward_peak_bytes": fwd, "kept_bytes": kept,
                     "backward_peak_bytes": bwd, "per_logit": {k: round(v / (T * V), 3) for k, v in
                                                              (("forward", fwd), ("kept", kept), ("backward", bwd))}}
            except Exception as exc:  # torch.compile of a DTensor loss may fail on the machine's torch
                r = {"parallel": parallel, "compiled": compiled, "error": repr(exc)[:400]}
            out["runs"].append(r)
            print(json.dumps(r), flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
