"""Each rank's compute actions under torch.distributed.pipelining's own schedule code, on the CPU.

Runs inside the validation venv: calls the schedule class's ``_calculate_single_rank_operations``
on a stand-in object carrying the attributes that method reads (no process group, no stages).
Reads [{"schedule": name, "pp": p, "stages_per_rank": v, "microbatches": m}, ...] on stdin;
prints, per request, per rank, the actions as [kind, local chunk, micro-batch] with kind one of
F, I, W, B (full backward) or ["F&B", forward action, backward action].
"""

import json
import sys
import types
import warnings

warnings.filterwarnings("ignore")


def _stand_in(cls, p: int, v: int, m: int):
    self = types.SimpleNamespace(pp_group_size=p, n_local_stages=v, _n_microbatches=m, num_stages=p * v)
    rounds = max(1, m // p)
    self.number_of_rounds, self.microbatches_per_round = rounds, m // rounds
    self._calculate_single_rank_operations = types.MethodType(cls._calculate_single_rank_operations, self)
    return self


def _local(stage: int, rank: int, p: int, v_shape: bool) -> int:
    if v_shape:
        return 0 if stage == rank else 1
    return stage // p


def _action(a, rank: int, p: int, v_shape: bool):
    from torch.distributed.pipelining.schedules import _ComputationType as T

    letters = {T.FORWARD: "F", T.BACKWARD_INPUT: "I", T.BACKWARD_WEIGHT: "W", T.FULL_BACKWARD: "B"}
    if a.computation_type == T.OVERLAP_F_B:
        return ["F&B"] + [_action(s, rank, p, v_shape) for s in a.sub_actions]
    return [letters[a.computation_type], _local(a.stage_index, rank, p, v_shape), a.microbatch_index]


def orders(req: dict) -> list:
    from torch.distributed.pipelining import schedules as S

    name, p, v, m = req["schedule"], req["pp"], req["stages_per_rank"], req["microbatches"]
    cls = S.get_schedule_class(name)
    v_shape = cls in (S.ScheduleZBVZeroBubble, S.ScheduleDualPipeV)
    self = _stand_in(cls, p, v, m)
    return [[_action(a, r, p, v_shape) for a in self._calculate_single_rank_operations(r) if a is not None]
            for r in range(p)]


if __name__ == "__main__":
    print(json.dumps([orders(r) for r in json.load(sys.stdin)]))
