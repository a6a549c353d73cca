"""Batched A16WFP4 GEMM in Triton: y[b] = x[b] @ dequant(w[b], w_scales[b])^T.

x bf16 [B, M, K] (any strides), w uint8 [B, N, K/2] (two E2M1 codes per byte, the even
element in the low nibble), w_scales uint8 [B, N, K/32] (E8M0, rows may be padded),
y bf16 [B, M, N] (any strides). activations "bf16" feeds x to tl.dot_scaled as bf16;
"mxfp4-even" re-quantizes x per 32-K group in the kernel with the `even` scale rule
(AITER's numerics) and runs an e2m1 x e2m1 tl.dot_scaled.

Grid: (M tiles x N tiles in GROUP_SIZE_M-row groups, batch, K split). NUM_KSPLIT > 1 writes
fp32 partials [NUM_KSPLIT, B, M, N] (in mxval's workspace when it is big enough) that a
second kernel sums into y.

Calling convention and rules: mxval kernels/python/README.md (no host sync, no host copy:
`run` may be captured into a CUDA graph).
"""
import torch
import triton
import triton.language as tl

_INT_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "NUM_KSPLIT", "num_warps", "num_stages")
_AMD_HINT_KEYS = ("waves_per_eu", "matrix_instr_nonkdim")  # launch options only the HIP backend knows
_CACHE_MODIFIERS = (None, "", ".ca", ".cg", ".cv")
_ACTIVATIONS = ("bf16", "mxfp4-even")
_REDUCE_BLOCK_M = 16
_REDUCE_BLOCK_N = 128


@triton.jit
def _quant_mxfp4_even(x, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """x [BLOCK_M, BLOCK_K] -> (E2M1 codes, two per byte along K, [BLOCK_M, BLOCK_K // 2];
    E8M0 scales [BLOCK_M, BLOCK_K // 32]), one scale per 32 consecutive K."""
    xg = tl.reshape(x.to(tl.float32), (BLOCK_M, BLOCK_K // 32, 32))
    amax = tl.max(tl.abs(xg), axis=2, keep_dims=True)
    # `even` rule: amax + 0x200000 rounds at the third mantissa bit (a carry reaches the
    # next power of two); the exponent field of that is floor(log2) + 127.
    field = ((amax.to(tl.int32, bitcast=True) + 0x200000) >> 23) & 0xFF
    x_exp = tl.where(field == 255, 127.0, (field - 129).to(tl.float32))  # log2(inf) clamps to 127
    x_exp = tl.where(x_exp < -127.0, -127.0, x_exp)  # zero group: scale byte 0, codes 0
    x_scales = (x_exp + 127).to(tl.uint8)
    # 2^-x_exp built from its bits so the scaling is exact (2^-127 is an fp32 subnormal).
    e_int = x_exp.to(tl.int32)
    inv_scale = tl.where(e_int == 127, 0x00400000, (127 - e_int) << 23).to(tl.float32, bitcast=True)
    v = xg * inv_scale
    a = tl.abs(v)
    # Nearest E2M1 magnitude {0, .5, 1, 1.5, 2, 3, 4, 6}: count the midpoints passed; a tie
    # goes to the even code (> at the midpoints below an odd code, >= below an even one);
    # everything above 5 saturates to 6 (code 7).
    mag = ((a > 0.25).to(tl.uint8) + (a >= 0.75).to(tl.uint8) + (a > 1.25).to(tl.uint8)
           + (a >= 1.75).to(tl.uint8) + (a > 2.5).to(tl.uint8) + (a >= 3.5).to(tl.uint8)
           + (a > 5.0).to(tl.uint8))
    codes = (mag | tl.where(v < 0.0, 8, 0).to(tl.uint8)).to(tl.uint8)
    lo, hi = tl.split(tl.reshape(codes, (BLOCK_M, BLOCK_K // 2, 2)))
    packed = (lo | (hi << 4)).to(tl.uint8)
    return packed, tl.reshape(x_scales, (BLOCK_M, BLOCK_K // 32)).to(tl.uint8)


# M and the split size are not specialized on (==1, %16): one compile serves every M of a table bucket.
@triton.jit(do_not_specialize=["M", "K_BLOCKS_PER_SPLIT"])
def _batched_gemm_a16wfp4_kernel(
        x_ptr, w_ptr, ws_ptr, c_ptr, M, N, K,
        stride_xb, stride_xm, stride_xk,
        stride_wb, stride_wn, stride_wk,
        stride_wsb, stride_wsn, stride_wsk,
        stride_ck, stride_cb, stride_cm, stride_cn,
        K_BLOCKS_PER_SPLIT,
        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
        GROUP_SIZE_M: tl.constexpr, EVEN_K: tl.constexpr, QUANT_X: tl.constexpr,
        CACHE_MODIFIER: tl.constexpr):
    """c[pid_k, b] = x[b] @ w[b]^T over this split's K blocks; c is y (NUM_KSPLIT == 1,
    stride_ck == 0) or the fp32 partials."""
    pid = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    pid_k = tl.program_id(2)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_rows = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_rows
    pid_n = (pid % num_pid_in_group) // group_rows

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_SIZE_K)        # x elements within the K block
    offs_kp = tl.arange(0, BLOCK_SIZE_K // 2)  # packed weight bytes within the K block
    offs_ks = tl.arange(0, BLOCK_SIZE_K // 32)  # scale groups within the K block
    x_rows = x_ptr + pid_b * stride_xb + offs_m[:, None] * stride_xm
    w_cols = w_ptr + pid_b * stride_wb + offs_n[None, :] * stride_wn
    ws_rows = ws_ptr + pid_b * stride_wsb + offs_n[:, None] * stride_wsn

    kb_begin = pid_k * K_BLOCKS_PER_SPLIT
    kb_end = tl.minimum(kb_begin + K_BLOCKS_PER_SPLIT, tl.cdiv(K, BLOCK_SIZE_K))
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in range(kb_begin, kb_end):
        k0 = kb * BLOCK_SIZE_K
        x_ptrs = x_rows + (k0 + offs_k)[None, :] * stride_xk
        w_ptrs = w_cols + (k0 // 2 + offs_kp)[:, None] * stride_wk  # [BLOCK_K / 2, BLOCK_N], packed along K
        ws_ptrs = ws_rows + (k0 // 32 + offs_ks)[None, :] * stride_wsk
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=n_ok[None, :], other=0, cache_modifier=CACHE_MODIFIER)
            ws = tl.load(ws_ptrs, mask=n_ok[:, None], other=127)
        else:
            # K tail: x elements, packed bytes and scale groups, each against its own length
            # (nothing past K, K/2, K/32 is read: mxval poisons it). Masked weight bytes load
            # as code 0 with scale 2^0, masked x as 0.
            x = tl.load(x_ptrs, mask=m_ok[:, None] & (offs_k[None, :] < K - k0), other=0.0)
            w = tl.load(w_ptrs, mask=n_ok[None, :] & (offs_kp[:, None] < K // 2 - k0 // 2), other=0,
                        cache_modifier=CACHE_MODIFIER)
            ws = tl.load(ws_ptrs, mask=n_ok[:, None] & (offs_ks[None, :] < K // 32 - k0 // 32), other=127)
        if QUANT_X:
            xq, xs = _quant_mxfp4_even(x, BLOCK_SIZE_M, BLOCK_SIZE_K)
            acc = tl.dot_scaled(xq, xs, "e2m1", w, ws, "e2m1", acc=acc)
        else:
            acc = tl.dot_scaled(x, None, "bf16", w, ws, "e2m1", acc=acc)

    c_ptrs = (c_ptr + pid_k.to(tl.int64) * stride_ck + pid_b * stride_cb
              + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit(do_not_specialize=["M"])
def _batched_gemm_a16wfp4_reduce_kernel(
        p_ptr, y_ptr, M, N,
        stride_pk, stride_pb, stride_pm,
        stride_ob, stride_om, stride_on,
        NUM_KSPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y[b] = sum over the splits of the fp32 partials p[:, b] (split order, fp32)."""
    pid = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    offs_m = (pid // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    p_ptrs = p_ptr + pid_b * stride_pb + offs_m[:, None] * stride_pm + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in tl.static_range(NUM_KSPLIT):
        acc += tl.load(p_ptrs, mask=mask, other=0.0)
        p_ptrs += stride_pk
    y_ptrs = y_ptr + pid_b * stride_ob + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(y_ptrs, acc.to(tl.bfloat16), mask=mask)


def _field(problem, name):
    """problem.<name>, or problem[name] for a mapping."""
    try:
        return getattr(problem, name)
    except AttributeError:
        return problem[name]


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _config_reason(config):
    if not isinstance(config, dict):
        return "config is not an object"
    for key in _INT_KEYS:
        if key not in config:
            return "config has no %s" % key
        v = config[key]
        if not _is_int(v) or v <= 0:
            return "config %s=%r is not a positive integer" % (key, v)
    for key in _AMD_HINT_KEYS:
        v = config.get(key)
        if v is not None and (not _is_int(v) or v < 0):
            return "config %s=%r is not a non-negative integer" % (key, v)
    if config.get("cache_modifier") not in _CACHE_MODIFIERS:
        return "config cache_modifier=%r is not one of %r" % (config.get("cache_modifier"), _CACHE_MODIFIERS)
    bk = config["BLOCK_SIZE_K"]
    if bk % 64:
        return "BLOCK_SIZE_K=%d is not a multiple of 64 (two E2M1 codes per byte, 32 codes per scale)" % bk
    for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"):
        if config[key] & (config[key] - 1):
            return "%s=%d is not a power of two (tl.arange)" % (key, config[key])
    if config["BLOCK_SIZE_M"] < 16 or config["BLOCK_SIZE_N"] < 16:
        return "BLOCK_SIZE_M and BLOCK_SIZE_N must be at least 16 (tl.dot_scaled tile)"
    return None


def _problem_reason(K, activations, device):
    if device != "cuda":
        return "device %r: this Triton kernel runs on a GPU ('cuda', NVIDIA or ROCm)" % (device,)
    if activations not in _ACTIVATIONS:
        return "activations %r not supported (%s)" % (activations, ", ".join(_ACTIVATIONS))
    if K % 32:
        return "K=%d is not a multiple of 32 (one E8M0 scale per 32 K)" % K
    return None


def can_implement(problem, config):
    """None if the kernel can run `problem` with `config`, else the reason."""
    return (_problem_reason(_field(problem, "K"), _field(problem, "activations"), _field(problem, "device"))
            or _config_reason(config))


def workspace_size(problem, config):
    """Bytes of the fp32 split-K partials [NUM_KSPLIT, B, M, N]; 0 without split K."""
    ksplit = config.get("NUM_KSPLIT", 1) if isinstance(config, dict) else 1
    if not _is_int(ksplit) or ksplit <= 1:
        return 0
    return ksplit * _field(problem, "B") * _field(problem, "M") * _field(problem, "N") * 4


def _partials(workspace, ksplit, B, M, N, device):
    """The [ksplit, B, M, N] fp32 partials: a view of mxval's workspace when it is big
    enough (contents undefined on entry: every element is written before it is read),
    else a caching-allocator temporary (graph-capturable)."""
    need = ksplit * B * M * N * 4
    if (workspace is not None and workspace.device == device and workspace.dtype == torch.uint8
            and workspace.dim() == 1 and workspace.numel() >= need and workspace.data_ptr() % 16 == 0):
        try:
            return workspace[:need].view(torch.float32).view(ksplit, B, M, N)
        except RuntimeError:
            pass
    return torch.empty((ksplit, B, M, N), dtype=torch.float32, device=device)


def run(x, w, w_scales, y, *, config, activations, workspace, stream):
    """Launches y = x @ dequant(w)^T per batch on the current stream (== `stream`)."""
    del stream  # Triton launches on torch's current stream, which mxval set to `stream`
    B, M, K = x.shape
    N = w.shape[1]
    why = _problem_reason(K, activations, x.device.type) or _config_reason(config)
    if why:
        raise ValueError("batched_gemm_a16wfp4: " + why)
    if x.dtype != torch.bfloat16 or y.dtype != torch.bfloat16 or w.dtype != torch.uint8 or w_scales.dtype != torch.uint8:
        raise TypeError("batched_gemm_a16wfp4: dtypes x %s, w %s, w_scales %s, y %s (want bf16, uint8, uint8, bf16)"
                        % (x.dtype, w.dtype, w_scales.dtype, y.dtype))
    if (tuple(w.shape) != (B, N, K // 2) or tuple(w_scales.shape) != (B, N, K // 32)
            or tuple(y.shape) != (B, M, N)):
        raise ValueError("batched_gemm_a16wfp4: shapes x %s, w %s, w_scales %s, y %s disagree"
                         % (tuple(x.shape), tuple(w.shape), tuple(w_scales.shape), tuple(y.shape)))
    if B == 0 or M == 0 or N == 0:
        return None

    bm, bn, bk = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"]
    ksplit = config["NUM_KSPLIT"]
    k_blocks_per_split = max(1, triton.cdiv(triton.cdiv(K, bk), ksplit))
    launch = {"num_warps": config["num_warps"], "num_stages": config["num_stages"]}
    if torch.version.hip is not None:
        launch.update({k: config[k] for k in _AMD_HINT_KEYS if config.get(k) is not None})

    if ksplit > 1:
        c = _partials(workspace, ksplit, B, M, N, x.device)
        c_strides = c.stride()
    else:
        c = y
        c_strides = (0,) + tuple(y.stride())
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn), B, ksplit)
    _batched_gemm_a16wfp4_kernel[grid](
        x, w, w_scales, c, M, N, K,
        *x.stride(), *w.stride(), *w_scales.stride(), *c_strides,
        k_blocks_per_split,
        BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=config["GROUP_SIZE_M"],
        EVEN_K=(K % bk == 0), QUANT_X=(activations == "mxfp4-even"),
        CACHE_MODIFIER=config.get("cache_modifier") or "",
        **launch)
    if ksplit > 1:
        rgrid = (triton.cdiv(M, _REDUCE_BLOCK_M) * triton.cdiv(N, _REDUCE_BLOCK_N), B)
        _batched_gemm_a16wfp4_reduce_kernel[rgrid](
            c, y, M, N,
            c.stride(0), c.stride(1), c.stride(2),
            *y.stride(),
            NUM_KSPLIT=ksplit, BLOCK_M=_REDUCE_BLOCK_M, BLOCK_N=_REDUCE_BLOCK_N, num_warps=4)
    return None
