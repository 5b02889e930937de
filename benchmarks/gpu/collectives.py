"""NCCL collective benchmark, one process per GPU (torchrun), in nccl-tests' conventions.

    torchrun --nproc-per-node 2 benchmarks/gpu/collectives.py --out results.json

For each operation (all_reduce, all_gather, reduce_scatter, all_to_all, send/receive) and message
size (64 KiB to 1 GiB, x4 steps) it times ``--iters`` calls after warm-up with CUDA events, and
records the median time, the algorithm bandwidth (bytes / time) and the bus bandwidth:
all_reduce x 2(n-1)/n, all_gather / reduce_scatter / all_to_all x (n-1)/n, send/receive x 1
(nccl-tests doc/PERFORMANCE.md). 'bytes' is the full buffer of all_reduce, the gathered output of
all_gather, the input of reduce_scatter and all_to_all, and the message of send/receive.
Also runs on the CPU with --backend gloo (small sizes; the operations gloo supports) for tests.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}


def sizes(lo: int, hi: int, factor: int = 4) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def run(op: str, nbytes: int, iters: int, warmup: int, device, dist, torch, back_to_back: bool = False) -> float:
    n, rank = dist.get_world_size(), dist.get_rank()
    elems = max(nbytes // 2, n)  # bf16
    elems -= elems % n
    x = torch.randn(elems, dtype=torch.bfloat16, device=device)
    if op == "all_gather":
        inp, out = x[: elems // n].contiguous(), torch.empty_like(x)
        fn = lambda: dist.all_gather_into_tensor(out, inp)  # noqa: E731
    elif op == "reduce_scatter":
        out = torch.empty(elems // n, dtype=x.dtype, device=device)
        fn = lambda: dist.reduce_scatter_tensor(out, x)  # noqa: E731
    elif op == "all_to_all":
        out = torch.empty_like(x)
        fn = lambda: dist.all_to_all_single(out, x)  # noqa: E731
    elif op == "sendrecv":
        peer = rank ^ 1
        buf = torch.empty_like(x)

        def fn():
            if rank % 2 == 0:
                dist.send(x, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(x, peer)
    else:
        fn = lambda: dist.all_reduce(x)  # noqa: E731
    for _ in range(warmup):
        fn()
    times = []
    cuda = device.type == "cuda"
    if back_to_back and cuda:
        # nccl-tests' way: the calls queued one after another between two events, so the launch
        # and dispatch of one call hide behind the previous call's transfer.
        for _ in range(3):
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters):
                fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3 / iters)
        return statistics.median(times) / (2 if op == "sendrecv" else 1)
    for _ in range(iters):
        if cuda:
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            t = a.elapsed_time(b) / 1e3
        else:
            t0 = time.perf_counter()
            fn()
            t = time.perf_counter() - t0
        times.append(t)
    # sendrecv ping-pong moves the message twice per call
    t = statistics.median(times) / (2 if op == "sendrecv" else 1)
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,all_to_all,sendrecv")
    ap.add_argument("--min-bytes", type=int, default=64 * 1024)
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--factor", type=int, default=4, help="message sizes grow by this factor")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--modes", default="sync,back_to_back",
                    help="sync: a synchronize before each timed call; back_to_back: calls queued in a row")
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    if args.backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    rows = []
    for mode, op, nbytes in itertools.product(args.modes.split(","), args.ops.split(","),
                                              sizes(args.min_bytes, args.max_bytes, args.factor)):
        t = run(op, nbytes, args.iters, args.warmup, device, dist, torch, back_to_back=mode == "back_to_back")
        algbw = nbytes / t
        rows.append({"op": op, "mode": mode, "bytes": nbytes, "time_s": t, "algbw": algbw,
                     "busbw": algbw * BUS_FACTOR[op](n)})
        if rank == 0:
            print(f"{mode:>12} {op:>14} {nbytes:>11} B  {t * 1e6:9.1f} us  algbw {algbw / 1e9:7.1f} GB/s  busbw {algbw * BUS_FACTOR[op](n) / 1e9:7.1f} GB/s", flush=True)
    if rank == 0 and args.out:
        meta = {"world": n, "backend": args.backend}
        if device.type == "cuda":
            meta.update(device=torch.cuda.get_device_name(device), torch=torch.__version__,
                        nccl=".".join(map(str, torch.cuda.nccl.version())))
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
