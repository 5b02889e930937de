"""Reading a PyTorch CUDA memory snapshot and saying why a run runs out of memory.

A snapshot is the pickle ``torch.cuda.memory._dump_snapshot`` writes: the allocator's segments
at dump time (each with its blocks) and, when history recording was on, a ring buffer of trace
events per device (alloc, free_requested, free_completed, segment_alloc/free/map/unmap, oom,
snapshot), and in newer PyTorch ``external_annotations`` (START/END markers around each
``Optimizer.step``). The modules, in the order the analysis runs:

- :mod:`~planner.memtrace.loader`: a restricted unpickler (plain data only, nothing runs) and a
  schema check that turns the raw pickle into a :class:`~planner.memtrace.loader.Snapshot`;
- :mod:`~planner.memtrace.timeline`: allocated and reserved bytes over the recorded window, one
  record per allocation and per segment, anchored on the dump-time segments when the ring buffer
  dropped early events; the allocator layout at any moment;
- :mod:`~planner.memtrace.classify`: each allocation's class (weights, gradients, optimizer,
  activations, transient, comm_buffers, unknown) from its Python frames, stream and lifetime;
- :mod:`~planner.memtrace.diagnose`: case A (memory really used) or case B (reserved inflated by a
  staircase of transient peaks, shape-churn fragmentation or a stream-pool split), with remedies;
- :mod:`~planner.memtrace.predict`: planner's memory prediction beside the measurement;
- :mod:`~planner.memtrace.report`: the JSON object and the human report; :mod:`~planner.memtrace.plot`
  the PNG timeline.

No module needs torch.
"""

from __future__ import annotations

CLASSES = ("weights", "gradients", "optimizer", "activations", "transient", "comm_buffers", "unknown")
"""Measured classes, in report order. The first six are DESIGN.md section 6's `memory.components`
(less `allocator`, which a snapshot measures as reserved minus allocated); `unknown` holds what the
evidence cannot place."""
