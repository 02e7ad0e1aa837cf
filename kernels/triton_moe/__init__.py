"""Fused MoE Triton kernels and the `triton` backend (kernels are imported lazily: see
backend.py)."""
