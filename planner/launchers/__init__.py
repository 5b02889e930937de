"""Launchers: one package per launcher holds everything planner knows about it.

- :mod:`planner.launchers.megatron`: Megatron-LM (megatron-core 0.19.2): ``write`` (a bash launch
  script for ``pretrain_gpt.py``), ``read`` (a launch script or argument list back to a job, plan
  and model), ``rules`` (its start-up checks on plans and on command lines), ``flags`` (the flag
  table of its own argparse parser);
- :mod:`planner.launchers.torchtitan`: torchtitan 0.3.0: ``write`` (the ``--module/--config``
  invocation) and ``rules``;
- :mod:`planner.launchers.json_export`: the plan with its predictions and launcher verdicts;
- :mod:`planner.launchers.bash`: the bounded bash reader the Megatron reader runs scripts through;
- :mod:`planner.launchers.common`: what the writers share (saved searches, the export-canonical
  plan, predictions, torchrun geometry).

Flag names follow shared/reference/launchers.md. The rules every launcher shares (model shape,
batch) stay in :mod:`planner.rules`, which composes them with each launcher's own.
"""
