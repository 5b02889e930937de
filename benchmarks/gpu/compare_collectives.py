"""Predicted against measured collective bandwidth on one NVLink domain.

    python benchmarks/gpu/compare_collectives.py results/validation/multi-gpu-raw/h200x2-collectives.json \
        [--hw h200] [--calibrate]

Prediction: planner's communication model (planner.cost.comm) for a group of the measured size
inside one NVLink domain: ring all-reduce / all-gather / reduce-scatter at the profile's NVLink
bus bandwidth with its latency term, all-to-all at the profile's NCCL all-to-all bandwidth,
send/receive at the point-to-point fraction. The device ran with NVLink multicast (NVLS) off
(NCCL_NVLS_ENABLE=0, the lending tool's setting), so all-reduce is compared with the ring formula.
``--calibrate`` feeds the large-message (>= 16 MiB) medians back as a calibration file
(planner.specs.calibration) and reports the calibrated model too.
"""

from __future__ import annotations

import argparse
import json
import statistics


def predicted_time(op: str, nbytes: float, n: int, rates) -> float:
    from planner.cost import comm

    if op == "all_reduce":
        return comm.all_reduce_time(nbytes, n, rates.nvlink_busbw, rates.nvlink_latency_s)
    if op in ("all_gather", "reduce_scatter"):
        return comm.gather_time(nbytes, n, rates.nvlink_busbw, rates.nvlink_latency_s)
    if op == "all_to_all":
        bw = dict(rates.a2a_nvlink)["alltoall"]
        return nbytes * (n - 1) / n / bw + rates.nvlink_latency_s
    return comm.p2p_time(nbytes, rates.nvlink_bw * rates.p2p_fraction, rates.nvlink_latency_s)


def rows_for(data: dict, rates) -> list[dict]:
    from benchmarks.gpu.collectives import BUS_FACTOR

    n = data["meta"]["world"]
    out = []
    for r in data["rows"]:
        t = predicted_time(r["op"], r["bytes"], n, rates)
        pred_bus = r["bytes"] / t * BUS_FACTOR[r["op"]](n)
        out.append({**r, "pred_busbw": pred_bus, "error": pred_bus / r["busbw"] - 1})
    return out


def calibration_from(data: dict, hw: str):
    from planner.specs.calibration import Calibration

    n = data["meta"]["world"]
    cols = []
    names = {"sendrecv": "send_recv"}
    for op in sorted({r["op"] for r in data["rows"]}):
        big = [r["busbw"] for r in data["rows"] if r["op"] == op and r["bytes"] >= 16 << 20]
        cols.append({"op": names.get(op, op), "span": "nvlink", "ranks": n, "busbw": statistics.median(big)})
    return Calibration(hardware=hw, source=f"benchmarks/gpu/collectives.py on {data['meta'].get('device')} x{n}",
                       collectives=cols)


def main() -> None:
    from planner.cost.rates import rates_for
    from planner.cost.setup import resolve_setup
    from planner.specs.catalog import load_hardware, load_model
    from planner.specs.job import Job
    from planner.specs.plan import Plan

    ap = argparse.ArgumentParser()
    ap.add_argument("measured")
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--calibrate", action="store_true")
    args = ap.parse_args()
    data = json.load(open(args.measured))
    n = data["meta"]["world"]
    setup = resolve_setup(load_model("llama3.1-8b"), load_hardware(args.hw), Job(gpus=n, global_batch=n, seq_len=4096),
                          Plan.parse(f"tp={n}"))
    variants = [("model", rates_for(setup, None))]
    if args.calibrate:
        variants.append(("calibrated", rates_for(setup, calibration_from(data, args.hw))))
    for name, rates in variants:
        rows = rows_for(data, rates)
        print(f"\n{name}: {data['meta'].get('device')} x{n}, bus bandwidth GB/s (measured / predicted, error)")
        big = [r for r in rows if r["bytes"] >= 16 << 20]
        for r in rows:
            print(f"  {r['op']:>14} {r['bytes'] / 2**20:>9.2f} MiB  {r['busbw'] / 1e9:7.1f} / {r['pred_busbw'] / 1e9:7.1f}  {r['error']:+.1%}")
        errs = [abs(r["error"]) for r in big]
        print(f"  >= 16 MiB: max |error| {max(errs):.1%}, median {statistics.median(errs):.1%}")


if __name__ == "__main__":
    main()
