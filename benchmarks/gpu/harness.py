"""Measure Megatron-Core training steps on one GPU: peak allocated and reserved memory, memory after
construction, per-layer saved bytes, step time.

Run one configuration (a fresh process each, so the CUDA context and the allocator start clean):

    python -m benchmarks.gpu.harness --config gqa-s4k-b1-none --out results.json

or all of them, each in its own subprocess, within a time budget:

    python -m benchmarks.gpu.harness --all --out-dir OUT --budget-s 480

A configuration with ``gpus`` > 1 (tensor, pipeline, virtual-pipeline and expert parallel degrees)
runs under torchrun, one process per GPU (``--all`` launches it); its JSON holds every rank's
figures under ``ranks`` and the run's largest peak and slowest median step at the top.

``--device cpu`` runs the same code on the CPU with gloo (tiny shapes only; what CI and the CPU
tests use): memory counters are then absent, the saved-tensor inventory still works.

What one run records (bytes unless named otherwise):
  context_bytes: device memory in use outside PyTorch's allocator (CUDA context, NCCL, library
    handles) = total - free (cudaMemGetInfo) - reserved, read after construction and after the run;
  after_init_{allocated,reserved}: after model + DDP + optimizer construction (Adam's moments are
    created lazily at the first step);
  steady_allocated: allocated at the end of a steady step (weights, main grads, master weights,
    moments, and caches Megatron keeps: the attention scores buffer, causal mask, RoPE table);
  step1_peak_*: the first step (it creates the optimizer states);
  peak_{allocated,reserved}: max over the timed steps; split into fwd_bwd_peak_* and
    optimizer_peak_*;
  step_time_s: median of the timed steps (forward + backward of all micro-batches + optimizer);
  inventory: one extra micro-batch forward, per module: bytes kept for backward (allocation delta
    across the module's forward) and its forward peak above the memory at entry; and the bytes of
    the unique storages autograd saved (saved_tensors_hooks), per module.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from benchmarks.gpu.configs import CONFIGS, RunConfig, by_name, megatron_config_kwargs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _patch_cpu():
    """Let Megatron-Core's DDP, optimizer and RNG tracker run on the CPU (tests only)."""
    import torch
    from megatron.core.tensor_parallel import random as mrandom

    torch.cuda.current_device = lambda: "cpu"  # DDP and the optimizer allocate on current_device()

    def _redirect(fn):
        def wrapped(*args, **kwargs):
            dev = kwargs.get("device")
            if dev is not None and str(dev).startswith("cuda"):
                kwargs["device"] = "cpu"
            return fn(*args, **kwargs)
        return wrapped

    for name in ("tensor", "zeros", "empty", "ones", "full", "arange", "zeros_like", "empty_like"):
        setattr(torch, name, _redirect(getattr(torch, name)))
    torch.Tensor.cuda = lambda self, *a, **k: self
    _type = torch.Tensor.type

    def _cuda_type(self, *args, **kwargs):  # Megatron's optimizers check 'torch.cuda.*Tensor'
        out = _type(self, *args, **kwargs)
        if not args and not kwargs and isinstance(out, str) and out.startswith("torch.") and ".cuda." not in out:
            return out.replace("torch.", "torch.cuda.", 1)
        return out

    torch.Tensor.type = _cuda_type
    torch.cuda.synchronize = lambda *a, **k: None

    class _Stream:
        def __init__(self, *a, **k):
            pass

        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        __hash__ = object.__hash__

        def record_event(self, *a, **k):
            return _Stream()

        def __getattr__(self, name):
            return lambda *a, **k: None

    _s = _Stream()
    torch.cuda.current_stream = lambda *a, **k: _s
    torch.cuda.Stream = _Stream
    torch.cuda.is_current_stream_capturing = lambda: False
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()

    class _NoTracker:
        def fork(self, *a, **k):
            return contextlib.nullcontext()

        def add(self, *a, **k):
            pass

        def is_initialized(self):
            return False

        def get_states(self):
            return {}

        def set_states(self, states):
            pass

    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    mrandom._set_cuda_rng_state = lambda *a, **k: None
    tracker = _NoTracker()
    mrandom.get_cuda_rng_tracker = lambda *a, **k: tracker
    import megatron.core.tensor_parallel as tp
    tp.get_cuda_rng_tracker = mrandom.get_cuda_rng_tracker
    # The alltoall dispatcher turns its split sizes into numpy only when they come from the GPU;
    # on the CPU they stay tensors, which all_to_all_single rejects (EP > 1).
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    def _to_cpu(tensor, as_numpy=False, record_stream=False):
        return tensor.numpy() if as_numpy and torch.is_tensor(tensor) else tensor

    moe_utils.maybe_move_tensor_to_cpu = _to_cpu
    if hasattr(token_dispatcher, "maybe_move_tensor_to_cpu"):
        token_dispatcher.maybe_move_tensor_to_cpu = _to_cpu


def _fix_checkpoint_without_output():
    """megatron-core 0.19.2 sets ``CheckpointWithoutOutput.fp8 = fp8 is not None``, so the default
    ``fp8=False`` takes the FP8 branch and fails without Transformer Engine (NameError on
    FP8GlobalStateManager) for the 'layernorm' and 'moe_act' recompute modules. Read the flag as a
    boolean, which is what the TE builds get for bf16."""
    from megatron.core.tensor_parallel import random as mrandom

    cls = mrandom.CheckpointWithoutOutput
    if getattr(cls, "_planner_fixed", False):
        return
    orig = cls.__init__

    def __init__(self, fp8=False):
        orig(self, fp8)
        self.fp8 = bool(fp8)

    cls.__init__ = __init__
    cls._planner_fixed = True


def _device_mallocs(torch) -> int:
    st = torch.cuda.memory_stats()
    return int(st.get("num_device_alloc", st.get("segment.all.allocated", 0)))


def _route_counter(model, torch):
    """Forward hooks on every MoE router that add up, on the GPU (no host sync inside the step),
    the tokens routed to each expert; ``read()`` returns per call the max/mean expert load."""
    counts: list = []

    def hook(_mod, _inp, out):
        routing_map = out[1] if isinstance(out, tuple) else None
        if routing_map is not None and routing_map.dim() == 2:
            counts.append(routing_map.sum(0))

    for mod in model.modules():
        if type(mod).__name__.endswith("Router"):
            mod.register_forward_hook(hook)

    def read() -> list[float]:
        out = [float(c.max()) / max(float(c.float().mean()), 1e-9) for c in counts]
        counts.clear()
        return out

    return read


def _sequence_parallel_torch_norm():
    """megatron-core 0.19.2's torch norms (the local spec without TE or Apex) refuse sequence
    parallelism, although a norm over the hidden dimension works on a sequence shard. Build them
    without it and mark their weights ``sequence_parallel``, so finalize_model_grads all-reduces
    their gradients over TP, which is what the TE and Apex norms get: the same tensors and memory."""
    from megatron.core.transformer import torch_norm

    cls = torch_norm.WrappedTorchNorm
    if getattr(cls, "_planner_sp", False):
        return
    orig = cls.__new__

    def __new__(klass, config, hidden_size, eps=1e-5, **kw):
        sp = config.sequence_parallel
        config.sequence_parallel = False
        try:
            norm = orig(klass, config, hidden_size, eps, **kw)
        finally:
            config.sequence_parallel = sp
        for p in norm.parameters() if sp else ():
            p.sequence_parallel = True
        return norm

    cls.__new__ = staticmethod(__new__)
    cls._planner_sp = True


class Run:
    """One configuration's model, optimizer and data on one device."""

    def __init__(self, cfg: RunConfig, device: str):
        import torch

        self.cfg = cfg
        self.device = device
        self.cuda = device == "cuda"
        os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
        import megatron.core.jit as mjit

        # Eager fusions: no torch.compile in the measured steps (same saved tensors, no compile time).
        mjit.disable_jit_fuser()
        _fix_checkpoint_without_output()
        _sequence_parallel_torch_norm()
        if not self.cuda:
            _patch_cpu()
        import torch.distributed as dist
        from megatron.core import parallel_state

        if not dist.is_initialized():
            backend = "nccl" if self.cuda else "gloo"
            if cfg.gpus > 1:  # one process per GPU, started by torchrun (RANK, WORLD_SIZE, ...)
                if self.cuda:
                    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
                dist.init_process_group(backend=backend, init_method="env://")
                assert dist.get_world_size() == cfg.gpus, f"{cfg.name} needs {cfg.gpus} processes"
            else:
                dist.init_process_group(backend=backend, world_size=1, rank=0,
                                        init_method=f"tcp://127.0.0.1:{_free_port()}")
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=cfg.tp, pipeline_model_parallel_size=cfg.pp,
            virtual_pipeline_model_parallel_size=cfg.vpp if cfg.vpp > 1 else None,
            expert_model_parallel_size=cfg.ep, expert_tensor_parallel_size=1 if cfg.model.experts else None)
        if self.cuda:
            from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

            # CUDA graphs (Megatron's local implementation) need the graph-safe RNG tracker
            # (CudaGraphManager asserts it: torch's graphsafe generator states).
            model_parallel_cuda_manual_seed(1234, use_cudagraphable_rng=cfg.cuda_graphs != "none")
            if cfg.cuda_graphs == "full_iteration":
                # Everything on Megatron's capture stream from the start (model, optimizer, every
                # step): torch builds without autograd.graph.set_override_stale_capture_stream
                # (pytorch/pytorch#180090) fail the capture when anything ran on the legacy default
                # stream before it (the first lease's runs and the warm-up alone on it both failed).
                from megatron.core.full_cuda_graph import get_shared_capture_stream

                torch.cuda.set_stream(get_shared_capture_stream())
        torch.manual_seed(1234)
        self.torch = torch

    def build(self):
        import torch
        import torch.nn.functional as F
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.transformer import TransformerConfig

        cfg, m = self.cfg, self.cfg.model
        kw = megatron_config_kwargs(cfg)
        kw["activation_func"] = F.silu if m.activation == "swiglu" else F.gelu
        kw["params_dtype"] = torch.bfloat16
        kw["pipeline_dtype"] = torch.bfloat16
        kw["use_cpu_initialization"] = not self.cuda
        self.tconfig = TransformerConfig(**kw)
        spec = get_gpt_layer_local_spec(num_experts=m.experts, moe_grouped_gemm=False,
                                        normalization=kw["normalization"])
        from megatron.core import parallel_state as ps
        # Megatron's Float16Module: all parameters bf16, the loss returned in fp32.
        from megatron.core.transformer.module import Float16Module

        # One model chunk per virtual stage (Megatron's get_model): the first chunk of the first
        # pipeline rank embeds, the last chunk of the last rank holds the output layer and loss.
        chunks = []
        for vp in range(cfg.vpp):
            vp_stage = vp if cfg.vpp > 1 else None
            first = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
            last = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
            model = GPTModel(config=self.tconfig, transformer_layer_spec=spec, vocab_size=m.vocab,
                             max_sequence_length=cfg.seq, pre_process=first, post_process=last,
                             share_embeddings_and_output_weights=False, position_embedding_type="rope",
                             vp_stage=vp_stage)
            if self.cuda:
                model.cuda(torch.cuda.current_device())
            chunks.append(Float16Module(self.tconfig, model))
        self.n_params = sum(p.numel() for c in chunks for p in c.parameters())
        ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                                   use_distributed_optimizer=cfg.dist_opt)
        self.chunks = [DistributedDataParallel(config=self.tconfig, ddp_config=ddp_config, module=c,
                                               disable_bucketing=i > 0) for i, c in enumerate(chunks)]
        self.model = self.chunks[0]
        opt_config = OptimizerConfig(optimizer="adam", lr=1e-5, weight_decay=0.01, bf16=True,
                                     use_distributed_optimizer=cfg.dist_opt, clip_grad=1.0)
        self.optimizer = get_megatron_optimizer(opt_config, self.chunks)
        syncs = [c.no_sync for c in self.chunks]
        self.tconfig.no_sync_func = syncs[0] if len(syncs) == 1 else syncs
        self.tconfig.finalize_model_grads_func = finalize_model_grads
        self.tconfig.grad_scale_func = self.optimizer.scale_loss

    def batches(self, seed: int = 0):
        torch = self.torch
        cfg = self.cfg
        dev = torch.cuda.current_device() if self.cuda else "cpu"
        g = torch.Generator(device="cpu").manual_seed(seed)
        out = []
        for _ in range(cfg.micro_batches):
            tokens = torch.randint(0, cfg.model.vocab, (cfg.mbs, cfg.seq), generator=g).to(dev)
            labels = torch.randint(0, cfg.model.vocab, (cfg.mbs, cfg.seq), generator=g).to(dev)
            pos = torch.arange(cfg.seq, device=dev).unsqueeze(0).expand(cfg.mbs, -1)
            # a dict, as Megatron's GPT batches are (the full-iteration graph's StaticBufferLoader
            # copies dicts of tensors into its static buffers)
            out.append({"tokens": tokens, "position_ids": pos, "labels": labels})
        return out

    @staticmethod
    def forward_step(data_iterator, model):
        batch = next(data_iterator)
        tokens, pos, labels = batch["tokens"], batch["position_ids"], batch["labels"]
        out = model(tokens, pos, None, labels=labels)

        def loss_func(output_tensor):
            loss = output_tensor.float().mean()
            return loss, {"lm loss": loss.detach()}

        return out, loss_func

    def fwd_bwd(self, data):
        from megatron.core.pipeline_parallel import get_forward_backward_func

        for c in self.chunks:
            c.zero_grad_buffer()
        self.optimizer.zero_grad()
        fb = get_forward_backward_func()
        if self.cfg.cuda_graphs == "full_iteration":
            # Megatron-LM's training loop wraps the schedule so (megatron/training/training.py,
            # megatron/core/full_cuda_graph.py): eager for cuda_graph_warmup_steps calls, then one
            # graph of the whole forward-backward of every micro-batch, replayed.
            if getattr(self, "_full_graph", None) is None:
                from megatron.core.full_cuda_graph import FullCudaGraphWrapper

                self._full_graph = FullCudaGraphWrapper(fb, cuda_graph_warmup_steps=self.tconfig.cuda_graph_warmup_steps)
            fb = self._full_graph
        # Interleaved 1F1B takes one iterator per chunk; each chunk draws every micro-batch.
        it = [iter(data) for _ in self.chunks] if len(self.chunks) > 1 else iter(data)
        kw = dict(forward_step_func=self.forward_step, data_iterator=it, model=self.chunks,
                  num_microbatches=self.cfg.micro_batches, seq_length=self.cfg.seq,
                  micro_batch_size=self.cfg.mbs, forward_only=False)
        if self.cfg.cuda_graphs != "full_iteration" or not self.cuda:
            return fb(**kw)
        # The eager warm-up steps run on the capture stream too: torch builds without
        # autograd.graph.set_override_stale_capture_stream (pytorch/pytorch#180090; torch 2.11 on the
        # device) keep the gradient-accumulation nodes' stream of the first backward, and a capture
        # on another stream then fails ("operation would make the legacy stream depend on a
        # capturing blocking stream"; megatron/core/full_cuda_graph.py warns of it).
        from megatron.core.full_cuda_graph import get_shared_capture_stream

        torch = self.torch
        stream = get_shared_capture_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            out = fb(**kw)
        torch.cuda.current_stream().wait_stream(stream)
        return out

    def step(self, data) -> dict:
        """One training step with the memory peaks of its two phases."""
        torch = self.torch
        rec: dict = {}
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        mallocs0 = _device_mallocs(torch) if self.cuda else 0
        u0 = resource.getrusage(resource.RUSAGE_SELF)
        c0 = time.process_time()
        t0 = time.perf_counter()
        losses = self.fwd_bwd(data)
        if self.cuda:
            torch.cuda.synchronize()
            rec["fwd_bwd_peak_allocated"] = torch.cuda.max_memory_allocated()
            rec["fwd_bwd_peak_reserved"] = torch.cuda.max_memory_reserved()
            rec["after_fwd_bwd_allocated"] = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        t1 = time.perf_counter()
        ok, grad_norm, _ = self.optimizer.step()
        if self.cuda:
            torch.cuda.synchronize()
            rec["optimizer_peak_allocated"] = torch.cuda.max_memory_allocated()
            rec["optimizer_peak_reserved"] = torch.cuda.max_memory_reserved()
            rec["after_step_allocated"] = torch.cuda.memory_allocated()
            rec["after_step_reserved"] = torch.cuda.memory_reserved()
        t2 = time.perf_counter()
        rec["time_s"] = t2 - t0 - (t1 - t1)  # t1 only splits the phases
        # Host CPU seconds of the step (all threads): near time_s when the step is host-bound.
        rec["cpu_s"] = time.process_time() - c0
        # User against system CPU time, page faults and involuntary context switches: a host-bound
        # step slowed by first-touch page faults (costly in a VM) or by other work on its CPU shows here.
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        rec["user_s"], rec["sys_s"] = u1.ru_utime - u0.ru_utime, u1.ru_stime - u0.ru_stime
        rec["minor_faults"], rec["major_faults"] = u1.ru_minflt - u0.ru_minflt, u1.ru_majflt - u0.ru_majflt
        rec["involuntary_switches"] = u1.ru_nivcsw - u0.ru_nivcsw
        if self.cuda:  # cudaMalloc calls during the step: nonzero while the allocator's cache grows
            rec["device_mallocs"] = _device_mallocs(torch) - mallocs0
        rec["fwd_bwd_time_s"] = t1 - t0
        rec["optimizer_time_s"] = t2 - t1
        # Only the last pipeline stage sees the loss.
        rec["loss"] = float(sum(float(rec_["lm loss"]) for rec_ in losses) / len(losses)) if losses else None
        rec["grad_norm"] = float(grad_norm) if grad_norm is not None else None
        rec["update_ok"] = bool(ok)
        return rec

    def inventory(self, data) -> dict:
        """Per-module bytes kept by one micro-batch's forward, by two measures."""
        torch = self.torch
        gpt = self.model.module
        while not hasattr(gpt, "decoder"):
            gpt = gpt.module
        modules = [("embedding", gpt.embedding)]
        modules += [(f"layer{i}", layer) for i, layer in enumerate(gpt.decoder.layers)]
        modules += [("final_norm", gpt.decoder.final_layernorm), ("output_layer", gpt.output_layer)]
        # Parameters (and their main-grad buffers) are not activations.
        params = {(p.untyped_storage().data_ptr(), p.device.type) for p in self.model.parameters()}
        state = {"on": True, "current": "pre", "seen": set(params), "saved": {}}
        deltas: dict = {}
        peaks: dict = {}

        def pack(t):
            if state["on"] and isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                key = (st.data_ptr(), st.device.type)
                if key not in state["seen"] and st.nbytes() > 0:
                    state["seen"].add(key)
                    state["saved"][state["current"]] = state["saved"].get(state["current"], 0) + st.nbytes()
            return t

        def pre(name):
            def hook(mod, args):
                if not state["on"]:
                    return
                state["current"] = name
                if self.cuda:
                    state[name] = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
            return hook

        def post(name):
            def hook(mod, args, out):
                if not state["on"]:
                    return
                if self.cuda:
                    deltas[name] = torch.cuda.memory_allocated() - state[name]
                    peaks[name] = torch.cuda.max_memory_allocated() - state[name]
                state["current"] = "after_" + name
            return hook

        handles = []
        for name, mod in modules:
            handles.append(mod.register_forward_pre_hook(pre(name)))
            handles.append(mod.register_forward_hook(post(name)))
        self.model.zero_grad_buffer()
        tokens, pos, labels = data[0]["tokens"], data[0]["position_ids"], data[0]["labels"]
        if self.cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = self.model(tokens, pos, None, labels=labels)
            loss = out.float().mean()
        state["on"] = False
        rec = {"saved_bytes": state["saved"]}
        if self.cuda:
            rec["kept_delta"] = deltas
            rec["fwd_peak_above_entry"] = peaks
            rec["microbatch_kept_total"] = torch.cuda.memory_allocated() - base
            torch.cuda.reset_peak_memory_stats()
            before_bwd = torch.cuda.memory_allocated()
        loss.backward()
        if self.cuda:
            torch.cuda.synchronize()
            rec["bwd_peak_above_start"] = torch.cuda.max_memory_allocated() - before_bwd
        for h in handles:
            h.remove()
        del out, loss
        self.model.zero_grad_buffer()
        return rec


def cuda_used() -> int:
    import torch

    free, total = torch.cuda.mem_get_info()
    return total - free


def _category(name: str) -> str:
    n = name.lower()
    if any(k in n for k in ("gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "matmul")):
        return "gemm"
    if "softmax" in n:
        return "softmax"
    if "nccl" in n:
        return "nccl"
    if "memcpy" in n or "memset" in n:
        return "memcpy"
    if "adam" in n or "foreach" in n or "multi_tensor" in n:
        return "optimizer"
    if "norm" in n:
        return "norm"
    if any(k in n for k in ("elementwise", "vectorized", "unrolled", "reduce", "copy", "fill", "index", "scatter",
                            "gather", "sort", "cat", "triu", "where", "masked")):
        return "elementwise/other"
    return "other"


def profile_step(run: Run, data, cuda: bool) -> dict:
    """One step under torch.profiler: wall time, GPU busy time (sum of kernel times) by category
    and the heaviest kernels; tells launch- or host-bound steps from kernel-bound ones."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        run.step(data)
        wall = time.perf_counter() - t
    rows = []
    for e in prof.key_averages():
        dev = getattr(e, "self_device_time_total", None)
        if dev is None:
            dev = getattr(e, "self_cuda_time_total", 0)
        if e.device_type == torch.autograd.DeviceType.CUDA and dev > 0:
            rows.append((e.key, dev / 1e6, e.count))
    cats: dict = {}
    for name, sec, _n in rows:
        c = _category(name)
        cats[c] = cats.get(c, 0.0) + sec
    rows.sort(key=lambda r: -r[1])
    launches = sum(n for _, _, n in rows)
    return {"wall_s": wall, "gpu_busy_s": sum(r[1] for r in rows), "kernel_launches": launches,
            "by_category_s": cats, "top_kernels": [{"name": k[:160], "s": s, "count": n} for k, s, n in rows[:30]]}


def run_one(cfg: RunConfig, device: str = "cuda", snapshot: str | None = None, max_entries: int = 20000,
            inventory: bool = True, profile: bool = False, warmup: int = 1, manual_gc: bool = False,
            fresh_data: bool = False, route_stats: bool = False, profile_after: int = 2,
            segments: bool = False) -> dict:
    """``warmup`` leading steps are left out of the timing and the peaks (step 1 always: it creates
    the optimizer states); ``manual_gc``, ``fresh_data`` and ``route_stats`` are diagnostics for
    steps whose time drifts (Python's collector, routing that changes as the fixed batch is learned,
    per-expert load)."""
    import torch

    res: dict = {"config": cfg.name, "spec": cfg.to_json(), "device": device, "torch": torch.__version__,
                 "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
    cuda = device == "cuda"
    if cuda:
        # Under torchrun, bind this process to its GPU before anything touches CUDA.
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        res["gpu"] = torch.cuda.get_device_name()
        res["cuda"] = torch.version.cuda
        res["context_bytes_start"] = cuda_used() - torch.cuda.memory_reserved()
        res["total_bytes"] = torch.cuda.mem_get_info()[1]
    import megatron.core

    res["megatron_core"] = getattr(megatron.core, "__version__", "?")
    run = Run(cfg, device)
    t = time.perf_counter()
    run.build()
    res["build_s"] = time.perf_counter() - t
    res["params"] = run.n_params
    if cfg.gpus > 1:
        from megatron.core import parallel_state as ps

        res["rank"] = {"global": torch.distributed.get_rank(),
                       "tp": ps.get_tensor_model_parallel_rank(), "pp": ps.get_pipeline_model_parallel_rank(),
                       "ep": ps.get_expert_model_parallel_rank(), "dp": ps.get_data_parallel_rank()}
    if cuda:
        torch.cuda.synchronize()
        res["after_init_allocated"] = torch.cuda.memory_allocated()
        res["after_init_reserved"] = torch.cuda.memory_reserved()
        res["context_bytes_after_init"] = cuda_used() - torch.cuda.memory_reserved()
    data = run.batches()
    steps = []
    if profile:
        for _ in range(profile_after):
            run.step(data)
        res["profile_after_steps"] = profile_after
        res["profile"] = profile_step(run, data, cuda)
        steps = [run.step(data)]
        res["step1"] = steps[0]
    elif snapshot and cuda:
        # Step 1 allocates the optimizer states; the snapshot records step 2.
        s1 = run.step(data)
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
        steps.append(run.step(data))
        torch.cuda.memory._dump_snapshot(snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
        res["snapshot"] = snapshot
        res["step1"] = s1
    else:
        import gc

        read_routes = _route_counter(torch.nn.ModuleList(run.chunks), torch) if route_stats else None
        if manual_gc:  # Megatron's --manual-gc: no automatic collection inside a step
            gc.disable()
        for i in range(cfg.steps):
            if fresh_data and i:
                data = run.batches(seed=i)
            if manual_gc:
                gc.collect()
            steps.append(run.step(data))
            if read_routes is not None:
                steps[-1]["expert_load_max_over_mean"] = read_routes()
        if manual_gc:
            gc.enable()
        res["step1"] = steps[0]
        res["warmup_steps"] = min(warmup, len(steps) - 1)
        res["all_step_times_s"] = [s["time_s"] for s in steps]
        steps = steps[res["warmup_steps"]:]
    res["steps"] = steps
    if cuda:
        res["peak_allocated"] = max(max(s["fwd_bwd_peak_allocated"], s["optimizer_peak_allocated"]) for s in steps)
        res["peak_reserved"] = max(max(s["fwd_bwd_peak_reserved"], s["optimizer_peak_reserved"]) for s in steps)
        res["fwd_bwd_peak_allocated"] = max(s["fwd_bwd_peak_allocated"] for s in steps)
        res["optimizer_peak_allocated"] = max(s["optimizer_peak_allocated"] for s in steps)
        res["steady_allocated"] = steps[-1]["after_step_allocated"]
        res["step1_peak_allocated"] = max(res["step1"]["fwd_bwd_peak_allocated"], res["step1"]["optimizer_peak_allocated"])
        res["step1_peak_reserved"] = max(res["step1"]["fwd_bwd_peak_reserved"], res["step1"]["optimizer_peak_reserved"])
        res["context_bytes"] = cuda_used() - torch.cuda.memory_reserved()
    if cuda and segments:
        res["segments"] = segment_summary(torch.cuda.memory_snapshot())
    times = [s["time_s"] for s in steps]
    res["step_time_s"] = statistics.median(times)
    res["step_times_s"] = times
    if inventory and not snapshot:
        try:
            res["inventory"] = run.inventory(data)
        except Exception as exc:  # the measurement above stands without it
            res["inventory_error"] = repr(exc)
    return res


def segment_summary(snapshot: list[dict]) -> list[dict]:
    """The caching allocator's segments after the last step (torch.cuda.memory_snapshot()), one row
    each: its pool (a CUDA graph's private pool or the general one), size, stream, and its blocks'
    bytes by state (active, pending free: freed but waiting on another stream's use, inactive) with
    the largest inactive block: where reserved memory that holds no tensor sits."""
    out = []
    for seg in snapshot:
        by_state: dict[str, int] = {}
        largest_free = 0
        for b in seg.get("blocks", []):
            by_state[b["state"]] = by_state.get(b["state"], 0) + int(b["size"])
            if b["state"] == "inactive":
                largest_free = max(largest_free, int(b["size"]))
        out.append({"pool": str(seg.get("segment_pool_id")), "type": seg.get("segment_type"),
                    "stream": seg.get("stream"), "total_size": int(seg["total_size"]),
                    "allocated_size": int(seg.get("allocated_size", 0)), "blocks": len(seg.get("blocks", [])),
                    "by_state": by_state, "largest_inactive": largest_free})
    return out


def run_all(names: list[str], out_dir: Path, budget_s: float, per_config_s: float, device: str,
            extra: list[str] | None = None, tag: str = "") -> list[dict]:
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    summary = []
    for name in names:
        left = budget_s - (time.perf_counter() - start)
        if left < 20:
            summary.append({"config": name, "skipped": "time budget"})
            continue
        out = out_dir / f"{name}{tag}.json"
        gpus = by_name(name).gpus
        launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}"]
                  if gpus > 1 else [sys.executable])
        cmd = launch + ["-m", "benchmarks.gpu.harness", "--config", name, "--out", str(out), "--device", device]
        cmd += extra or []
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=min(per_config_s, left))
            rc, log = proc.returncode, proc.stdout[-4000:] + proc.stderr[-8000:]
        except subprocess.TimeoutExpired as exc:
            rc, log = "timeout", str(exc)[-2000:]
        dt = time.perf_counter() - t
        (out_dir / f"{name}{tag}.log").write_text(log)
        row = {"config": name + tag, "rc": rc, "wall_s": round(dt, 1)}
        if out.exists():
            r = json.loads(out.read_text())
            for k in ("peak_allocated", "peak_reserved", "step_time_s", "error"):
                if k in r:
                    row[k] = r[k]
        summary.append(row)
        print(json.dumps(row), flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", help="configuration name (benchmarks/gpu/configs.py)")
    p.add_argument("--all", action="store_true", help="every validation configuration, one subprocess each")
    p.add_argument("--only", default=None, help="with --all: comma-separated names")
    p.add_argument("--out", help="JSON file for --config")
    p.add_argument("--out-dir", default="gpu-results", help="folder for --all")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--budget-s", type=float, default=480.0)
    p.add_argument("--per-config-s", type=float, default=150.0)
    p.add_argument("--snapshot", default=None, help="write a memory snapshot of step 2 to this pickle")
    p.add_argument("--max-entries", type=int, default=20000)
    p.add_argument("--no-inventory", action="store_true")
    p.add_argument("--segments", action="store_true", help="record the allocator's segments after the last step")
    p.add_argument("--profile", action="store_true", help="profile one step (torch.profiler summary) instead of timing")
    p.add_argument("--profile-after", type=int, default=2, help="with --profile: steps run before the profiled one")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the configuration's)")
    p.add_argument("--warmup", type=int, default=1, help="leading steps left out of times and peaks (at least 1)")
    p.add_argument("--manual-gc", action="store_true", help="diagnostic: gc.disable(), collect between steps")
    p.add_argument("--fresh-data", action="store_true", help="diagnostic: a new random batch every step")
    p.add_argument("--route-stats", action="store_true", help="diagnostic: per-step max/mean expert load")
    p.add_argument("--tag", default="", help="with --all: suffix for the output files")
    a = p.parse_args(argv)
    if a.all:
        names = a.only.split(",") if a.only else [c.name for c in CONFIGS]
        extra = (["--profile", "--no-inventory", "--profile-after", str(a.profile_after)] if a.profile else [])
        extra += ["--no-inventory"] if a.no_inventory and not a.profile else []
        extra += ["--steps", str(a.steps)] if a.steps else []
        extra += ["--warmup", str(a.warmup)]
        extra += [f for f, on in (("--manual-gc", a.manual_gc), ("--fresh-data", a.fresh_data),
                                  ("--route-stats", a.route_stats), ("--segments", a.segments)) if on]
        summary = run_all(names, Path(a.out_dir), a.budget_s, a.per_config_s, a.device, extra, a.tag)
        (Path(a.out_dir) / "summary.json").write_text(json.dumps(summary, indent=1))
        return 0
    if not a.config:
        p.error("--config NAME or --all")
    cfg = by_name(a.config)
    if a.steps:
        cfg = replace(cfg, steps=a.steps)
    try:
        res = run_one(cfg, a.device, a.snapshot, a.max_entries, inventory=not a.no_inventory and cfg.gpus == 1,
                      profile=a.profile,
                      warmup=max(1, a.warmup), manual_gc=a.manual_gc, fresh_data=a.fresh_data,
                      route_stats=a.route_stats, profile_after=a.profile_after, segments=a.segments)
    except Exception as exc:
        res = {"config": cfg.name, "error": repr(exc), "traceback": traceback.format_exc()}
        print(res["traceback"], file=sys.stderr)
    if cfg.gpus > 1:
        res = _gather_ranks(cfg, res)
        if res is None:  # not global rank 0
            _destroy()
            return 0
    text = json.dumps(res, indent=1, default=str)
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    _destroy()
    return 0 if "error" not in res else 1


def _destroy() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def _gather_ranks(cfg: RunConfig, res: dict) -> dict | None:
    """Every rank's result on global rank 0, with the run's figures: the largest peak of any rank
    and the slowest rank's median step (a step ends when the last rank's optimizer step does)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return res
    ranks: list = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, res)
    if dist.get_rank() != 0:
        return None
    out = {"config": cfg.name, "spec": cfg.to_json(), "world": len(ranks), "ranks": ranks}
    errors = [r.get("error") for r in ranks if r.get("error")]
    if errors:
        out["error"] = errors[0]
        return out
    for key in ("peak_allocated", "peak_reserved", "step_time_s", "params"):
        vals = [r[key] for r in ranks if key in r]
        if vals:
            out[key] = max(vals)
    return out


if __name__ == "__main__":
    sys.exit(main())
