"""Pure-PyTorch MXFP4 (A16WFP4) batched GEMM for mxval: a device-agnostic kernel
library whose bug variants (variants.json) test the validator. See gemm.py."""
