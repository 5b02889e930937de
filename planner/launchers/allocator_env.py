"""The allocator and NCCL environment a plan's memory was costed with, written into launch scripts
and read back from them (strings at the edge; the value inside is Assumptions.expandable_segments).

PyTorch reads ``PYTORCH_CUDA_ALLOC_CONF`` as comma-separated ``key:value`` pairs
(c10/cuda/CUDAAllocatorConfig.cpp, parseArgs; ``expandable_segments:True``/``False``)."""

from __future__ import annotations

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
NCCL_BUFFSIZE_DEFAULT = 4 * 2**20
"""NCCL_BUFFSIZE's documented default (NCCL docs, Environment Variables: 4 MiB), which the
communicator estimate (hw_specs/efficiency nccl_bytes_per_communicator) assumes."""


def expandable(setup) -> bool:
    """Whether the setup's reserved memory was costed with expandable segments (the explicit
    assumption, else planner's default: on with Transformer Engine; planner.cost.setup)."""
    a = setup.assumptions
    return a.expandable_segments if a.expandable_segments is not None else a.implementation == "te"


def allocator_environment(setup) -> tuple[dict[str, str], dict[str, str]]:
    """(variables, why) for a launch script: the allocator setting the memory estimate assumed and
    NCCL's buffer size the communicator estimate assumed (its default, made explicit so a site's
    nccl.conf does not move it)."""
    env: dict[str, str] = {}
    why: dict[str, str] = {}
    if setup.assumptions.allocator_margin_bytes is None:
        env[ALLOC_CONF] = f"expandable_segments:{expandable(setup)}"
        why[ALLOC_CONF] = ("the reserved-memory estimate assumed this allocator setting "
                           "(planner explain: reserved breakdown)")
    env["NCCL_BUFFSIZE"] = str(NCCL_BUFFSIZE_DEFAULT)
    why["NCCL_BUFFSIZE"] = "the communicator-buffer estimate assumes NCCL's default 4 MiB per channel and peer"
    return env, why


def expandable_from_env(env: dict[str, str]) -> bool | None:
    """expandable_segments as a script's PYTORCH_CUDA_ALLOC_CONF sets it (None: not set there).
    PyTorch takes the last occurrence of a key and accepts only True or False (CUDAAllocatorConfig.cpp)."""
    conf = env.get(ALLOC_CONF)
    if conf is None:
        return None
    found = None
    for item in conf.split(","):
        key, _, value = item.strip().partition(":")
        if key.strip() == "expandable_segments":
            found = value.strip() == "True"
    return found
