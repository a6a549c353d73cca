"""Triton MXFP4 batched GEMM (AITER batched_gemm_a16wfp4 style) for mxval's Python
kernel-library contract (kernels/python/README.md). The kernel is `bmm.run`."""
