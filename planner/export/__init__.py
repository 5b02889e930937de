"""Kept for one documented import path: ``from planner.export.megatron_args import
plan_from_megatron_args`` (docs/export.md before the launchers moved). Everything planner knows
about launchers lives in :mod:`planner.launchers`."""
