"""Single-GPU ground truth: Megatron-Core training steps measured on a real GPU, and the planner's
predictions for the same configurations (docs/gpu.md says how to run them)."""
