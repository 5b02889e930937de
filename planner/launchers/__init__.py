"""Launchers: turn a plan into what Megatron-LM or torchtitan runs, and read Megatron back.

- :mod:`planner.export.megatron`: a bash launch script for Megatron-LM's ``pretrain_gpt.py``;
- :mod:`planner.export.torchtitan`: the torchtitan 0.3 ``--module/--config`` invocation;
- :mod:`planner.export.json_export`: the plan with its predictions;
- :mod:`planner.export.megatron_args`: a Megatron launch script or argument list back to a plan;
- :mod:`planner.export.common`: loading plans (``--plan`` or a ``search --save`` file), the
  export-canonical form, predictions.

Flag names follow shared/reference/launchers.md (megatron-core 0.19.2, torchtitan 0.3.0);
:mod:`planner.export.megatron_flags` is the full flag table of Megatron's own parser.
"""
