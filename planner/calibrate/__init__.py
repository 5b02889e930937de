"""`planner calibrate`: micro-benchmarks of one GPU (GEMM, HBM copy, attention kernels) whose results
feed the time model through ``--calibration FILE``. Needs PyTorch with CUDA (the optional ``gpu``
extra); nothing here is imported by the rest of planner."""
