"""Megatron-Bridge 0.6.2 (NVIDIA's recipe-based entry point to Megatron-Core, PyPI
``megatron-bridge``): ``write`` (a ``run_recipe.py`` launch: the model's recipe plus Hydra-style
``KEY=VALUE`` overrides of its ConfigContainer), ``read`` (such a launch, an override list, or a
ConfigContainer YAML back to a job and plan), ``recipes`` (the recipes planner knows and what each
sets that a plan depends on)."""
