"""Backends: CUDA on the GPU, and the CPU reference (interpreter and simulator)."""
