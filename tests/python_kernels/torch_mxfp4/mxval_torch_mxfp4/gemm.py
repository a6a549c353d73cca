"""MXFP4 batched GEMM y[b] = x[b] @ dequant(w[b])^T in plain PyTorch ops.

Follows the calling convention of kernels/python/README.md. Device-agnostic: only
tensor ops on the arguments' device, no host copies, no synchronization and no
data-dependent Python control flow, so it also runs on CUDA streams and under
graph capture. Every lookup table is computed on the device from arange: a
torch.tensor(list, device="cuda") would be a pageable host-to-device copy.

K is processed in chunks of BLOCK_SIZE_K; the chunks are split into NUM_KSPLIT
contiguous ranges whose fp32 partial sums go to the workspace, viewed as float32
[NUM_KSPLIT, B, M, N], and a reduce step sums them into y.
"""
from collections.abc import Mapping

import torch

_GROUP = 32  # K elements per E8M0 scale
_E8M0_BIAS = 127
_E8M0_NAN = 0xFF
_REQUIRED_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "NUM_KSPLIT")
_ACTIVATIONS = ("bf16", "mxfp4-even")


def _field(problem, name):
    # The problem may come as a mapping or as an object with attributes.
    return problem[name] if isinstance(problem, Mapping) else getattr(problem, name)


def _config_problem(K, activations, config):
    for key in _REQUIRED_KEYS:
        if key not in config:
            return f"config lacks {key}"
    if activations not in _ACTIVATIONS:
        return f"activations {activations!r} not in {_ACTIVATIONS}"
    if K % _GROUP != 0:
        return f"K = {K} is not a multiple of {_GROUP}"
    bk = config["BLOCK_SIZE_K"]
    if not isinstance(bk, int) or bk <= 0 or bk % _GROUP != 0:
        return f"BLOCK_SIZE_K = {bk!r} is not a positive multiple of {_GROUP}"
    ksplit = config["NUM_KSPLIT"]
    if not isinstance(ksplit, int) or ksplit < 1:
        return f"NUM_KSPLIT = {ksplit!r} is not a positive integer"
    return None


def can_implement(problem, config):
    return _config_problem(_field(problem, "K"), _field(problem, "activations"), config)


def _workspace_bytes(B, M, N, config):
    ksplit = config["NUM_KSPLIT"]
    return ksplit * B * M * N * 4 if ksplit > 1 else 0


def workspace_size(problem, config):
    return _workspace_bytes(_field(problem, "B"), _field(problem, "M"), _field(problem, "N"), config)


def _exp2(e):
    """2^e as float32 for an int32 tensor e in [-149, 127], exact (subnormals too)."""
    e = e.to(torch.int32)  # an int64 e would make view(float32) split each element in two
    lo = e < -126
    # Subnormal results: build the normal 2^(e+32) and scale by 2^-32, which is exact
    # because 2^e is representable.
    v = ((torch.where(lo, e + 32, e) + 127) << 23).view(torch.float32)
    return torch.where(lo, v * 2.0 ** -32, v)


def _e2m1_table(device):
    """float32 [16]: the value of each E2M1 code; code 8 is -0."""
    code = torch.arange(16, device=device, dtype=torch.int64)
    # Magnitudes in half-units 0, 1, 2, 3, 4, 6, 8, 12: the nibbles of 0xC8643210.
    half = (torch.full_like(code, 0xC8643210) >> (4 * (code & 7))) & 0xF
    mag = half.to(torch.float32) * 0.5
    return torch.where(code >= 8, -mag, mag)


def _dequantize_weights(w, w_scales):
    """fp32 [B, N, K] from packed E2M1 [B, N, K/2] and E8M0 scales [B, N, K/32]."""
    B, N, half_k = w.shape
    K = 2 * half_k
    # Element 2i is the low nibble of byte i.
    codes = torch.stack((w & 0xF, w >> 4), dim=-1).reshape(B, N, K)
    values = _e2m1_table(w.device)[codes.long()]
    s = w_scales.to(torch.int32)
    scales = torch.where(s == _E8M0_NAN, float("nan"), _exp2(s - _E8M0_BIAS))
    return (values.view(B, N, K // _GROUP, _GROUP) * scales.unsqueeze(-1)).view(B, N, K)


def _requantize_even(xf):
    """Fake-quantizes fp32 [B, M, K] per 32-K group with the `even` scale rule."""
    B, M, K = xf.shape
    g = xf.view(B, M, K // _GROUP, _GROUP)
    finite = torch.isfinite(g).all(dim=-1, keepdim=True)
    a = g.abs()
    amax = torch.where(finite, a.amax(dim=-1, keepdim=True), torch.zeros_like(g[..., :1]))
    amax_bits = amax.view(torch.int32)
    # amax >= 0, so ((bits + 0x200000) & 0xFF800000) >> 23 is this exponent field.
    field = (amax_bits + 0x200000) >> 23
    # floor(log2) - 2, clamped to [-127, 127]. Field 0 (a zero rounded amax) clamps to
    # -127; field 255 (the rounding carried into Inf) is log2 = inf, which clamps to 127.
    e = torch.where(field == 255, 127, (field - 129).clamp(-127, 127))
    scale = _exp2(e)
    q = a / scale
    # Nearest E2M1 magnitude, ties to the even code, saturating at 6.
    idx = ((q > 0.25).to(torch.int64) + (q >= 0.75) + (q > 1.25) + (q >= 1.75)
           + (q > 2.5) + (q >= 3.5) + (q > 5.0))
    deq = torch.copysign(_e2m1_table(xf.device)[idx] * scale, g)
    return torch.where(finite, deq, float("nan")).view(B, M, K)


def _split_ranges(K, block_k, ksplit):
    """[k_lo, k_hi) of each split: contiguous runs of whole BLOCK_SIZE_K chunks
    (the last chunk may be short); trailing splits may be empty."""
    num_chunks = (K + block_k - 1) // block_k
    per_split = (num_chunks + ksplit - 1) // ksplit
    ranges = []
    for s in range(ksplit):
        k_lo = min(s * per_split * block_k, K)
        k_hi = min((s + 1) * per_split * block_k, K)
        ranges.append((k_lo, k_hi))
    return ranges


def _accumulate(xf, wf, k_lo, k_hi, block_k, out):
    """out (fp32 [B, M, N]) = sum over the chunks of [k_lo, k_hi) of x_chunk @ w_chunk^T."""
    out.zero_()  # an empty split still owns its partial: the workspace is garbage on entry
    for k0 in range(k_lo, k_hi, block_k):
        k1 = min(k0 + block_k, k_hi)
        out += torch.matmul(xf[:, :, k0:k1], wf[:, :, k0:k1].transpose(1, 2))


def _reduce_splits(ws32, ksplit, B, M, N, y):
    # The partials lie row-major [KSPLIT, B, M, N], as run() wrote them.
    parts = ws32.view(ksplit, B, M, N)
    y.copy_(parts.sum(dim=0))


def run(x, w, w_scales, y, *, config, activations, workspace, stream):
    B, M, K = x.shape
    N = w.shape[1]
    reason = _config_problem(K, activations, config)
    if reason is not None:
        raise ValueError(reason)
    if w.shape != (B, N, K // 2) or w_scales.shape != (B, N, K // _GROUP) or y.shape != (B, M, N):
        raise ValueError(f"shapes x {tuple(x.shape)} w {tuple(w.shape)} "
                         f"w_scales {tuple(w_scales.shape)} y {tuple(y.shape)} disagree")
    block_k = config["BLOCK_SIZE_K"]
    ksplit = config["NUM_KSPLIT"]

    # Only the views are read: no storage access beyond them (their padding is poisoned).
    xf = x.to(torch.float32).contiguous()
    if activations == "mxfp4-even":
        xf = _requantize_even(xf)
    wf = _dequantize_weights(w, w_scales)

    if ksplit == 1:
        acc = torch.empty((B, M, N), dtype=torch.float32, device=x.device)
        _accumulate(xf, wf, 0, K, block_k, acc)
        y.copy_(acc)
        return None

    nbytes = _workspace_bytes(B, M, N, config)
    if workspace is None or workspace.numel() < nbytes:
        raise ValueError(f"workspace of {nbytes} bytes needed")
    ws32 = workspace[:nbytes].view(torch.float32)
    for s, (k_lo, k_hi) in enumerate(_split_ranges(K, block_k, ksplit)):
        part = ws32[s * B * M * N:(s + 1) * B * M * N].view(B, M, N)
        _accumulate(xf, wf, k_lo, k_hi, block_k, part)
    _reduce_splits(ws32, ksplit, B, M, N, y)
    return None
