/* mxval kernel ABI, version 3: how a kernel library presents A16WFP4 kernels.
 *
 * A kernel library is a shared object exporting one C symbol:
 *
 *     const mxval_kernel_library* mxval_get_kernel_library(void);
 *
 * The returned table (static storage, valid until dlclose) lists kernels by
 * name with the archs and numerics modes they support, the tile configs they
 * were compiled for, and entry points taking raw device pointers, strides
 * and a stream. mxval's built-in kernels are exposed through exactly this
 * ABI, so a worker validates a pull request's kernel library (dlopen'd from
 * its configured directory) the same way it validates its own.
 *
 * The problem:  y[b, m, n] = sum_k x[b, m, k] * dequant(w)[b, n, k]
 *   x        (B, M, K)     bf16, strides in elements (x_stride_k may be != 1)
 *   w_packed (B, N, K/2)   uint8, element 2i in the low nibble (E2M1)
 *   w_scales (B, N, K/32)  uint8 E8M0, 2^(s-127), 0xFF = NaN
 *   y        (B, M, N)     bf16, strides in elements, n contiguous
 *                          (head-major: (M*N, N); batch-major: (N, B*N))
 * Activation modes: MXVAL_ACT_BF16 uses x as is; MXVAL_ACT_MXFP4_EVEN
 * re-quantizes x per 32-K group with the "even" scale rule first (AITER).
 *
 * Rules for implementers (mxval checks each on every run; docs/job_spec.md):
 *  - can_implement() is asked before every run(); a kernel that cannot take
 *    the arguments (a strided x, a K its config does not fit) says so there
 *    and is then not run. Jobs include x with x_stride_k != 1.
 *  - NaN and Inf follow IEEE arithmetic and the format: a 0xFF scale makes
 *    its 32 weights NaN, Inf * 0 is NaN, Inf - Inf is NaN (jobs put such
 *    values inside K by default).
 *  - Never read w_scales past K/32 groups, w_packed past K/2 bytes, or x past
 *    row M-1 / column K-1 (mxval poisons those regions with NaN / 0xFF).
 *  - Write every y element in range and nothing else (mxval leaves poison in
 *    y, which an unwritten element keeps, and poisoned guards before y's
 *    first and after its last element, checked after every run on the host
 *    and the device: a write there fails the run as out of bounds).
 *  - Entry points return 0 on success; non-zero with a NUL-terminated message
 *    in err (at most err_len bytes) otherwise. They must not abort.
 *  - run() may be asynchronous on `stream`; the caller synchronizes.
 *  - `workspace` (device memory of workspace_size() bytes) is scratch, e.g.
 *    split-K partials; its contents on entry are undefined (mxval fills it
 *    with 0xFF bytes, NaN as fp32, before every checked run; on the host a
 *    guard after it must stay untouched).
 *
 * Launch flags (version 2). args->launch_flags says what the caller allows
 * for this run; a kernel's launch_flags say which of them its run() acts on.
 * A kernel may ignore any flag: a plain launch is always correct.
 *  - MXVAL_LAUNCH_PDL (CUDA programmatic dependent launch): the kernel may be
 *    launched so that it starts while the kernel before it on the stream is
 *    still running. Before griddepcontrol.wait it may read only w_packed and
 *    w_scales (weights are not produced by the kernel before); x, y and the
 *    workspace only after it. mxval checks this: in a launch=pdl task the
 *    kernel runs right after one that writes x late and reads y late.
 *
 * Config objects (version 3). args->config_json is the dispatch entry's
 * config object as the job's table wrote it: JSON text with every key and
 * value (AITER's BLOCK_SIZE_M ... num_stages, waves_per_eu, cache_modifier,
 * and any key of the library's own; re-serialized with sorted keys, the
 * table's "kernel" key left out), NUL-terminated, valid for the call;
 * NULL when the job gave a bare tile config. `config` carries the six
 * integer fields of the same entry. A kernel that reads only `config` is
 * still correct; one whose configs carry more (a Triton kernel's tuning
 * keys) reads them here. Python kernel libraries receive it as a dict
 * (kernels/python/README.md).
 *
 * Version 1 (no launch flags) libraries still load: their kernels are read
 * with the version-1 layout and act on no flags. A version-1 run() reads
 * only the version-1 prefix of mxval_gemm_args, which is unchanged; a
 * version-2 run() reads the prefix up to launch_flags. Version-2 and
 * version-3 tables have the same layout.
 */
#ifndef MXVAL_KERNEL_API_H_
#define MXVAL_KERNEL_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MXVAL_KERNEL_ABI_VERSION 3u
#define MXVAL_KERNEL_ABI_MIN_VERSION 1u /* the oldest a loader accepts */
#define MXVAL_KERNEL_LIBRARY_SYMBOL "mxval_get_kernel_library"

enum mxval_activation_mode {
  MXVAL_ACT_BF16 = 0,
  MXVAL_ACT_MXFP4_EVEN = 1,
};

enum mxval_launch_flag {
  MXVAL_LAUNCH_PDL = 1,  /* programmatic dependent launch (CUDA, sm_90+) */
};

enum mxval_device_kind {
  MXVAL_DEVICE_CPU = 0,
  MXVAL_DEVICE_CUDA = 1,
  MXVAL_DEVICE_HIP = 2,
};

/* AITER's names: BLOCK_SIZE_M/N/K, NUM_KSPLIT, num_stages, num_warps. */
typedef struct mxval_tile_config {
  int32_t block_m, block_n, block_k, ksplit, num_stages, num_warps;
} mxval_tile_config;

typedef struct mxval_gemm_args {
  int64_t B, M, N, K;
  int32_t activations; /* enum mxval_activation_mode */
  const void* x;       /* bf16 */
  int64_t x_stride_b, x_stride_m, x_stride_k;
  const uint8_t* w_packed;
  int64_t w_packed_stride_b, w_packed_stride_n; /* bytes */
  const uint8_t* w_scales;
  int64_t w_scales_stride_b, w_scales_stride_n; /* bytes */
  void* y;             /* bf16 */
  int64_t y_stride_b, y_stride_m;
  void* workspace;
  size_t workspace_bytes;
  void* stream;        /* cudaStream_t / hipStream_t; NULL for CPU kernels */
  uint32_t launch_flags; /* version 2: bits of enum mxval_launch_flag allowed for this run */
  const char* config_json; /* version 3: the entry's config object as JSON text, or NULL */
} mxval_gemm_args;

typedef struct mxval_kernel {
  const char* name;          /* unique within the library, e.g. "a16wfp4_mma" */
  int32_t device;            /* enum mxval_device_kind */
  const char* archs;         /* comma-separated: "sm_90a", "gfx90a,gfx942", "cpu" */
  uint32_t activation_modes; /* bit (1u << mode) per supported mode */
  const mxval_tile_config* configs; /* configs this build can run */
  int32_t num_configs;
  /* 0 if run() accepts (args, config); else non-zero and a reason. */
  int32_t (*can_implement)(const mxval_gemm_args* args, const mxval_tile_config* config, char* err, size_t err_len);
  size_t (*workspace_size)(const mxval_gemm_args* args, const mxval_tile_config* config);
  int32_t (*run)(const mxval_gemm_args* args, const mxval_tile_config* config, char* err, size_t err_len);
  uint32_t launch_flags;     /* version 2: the enum mxval_launch_flag bits run() acts on */
} mxval_kernel;

typedef struct mxval_kernel_library {
  uint32_t abi_version;      /* MXVAL_KERNEL_ABI_VERSION */
  const char* library_name;  /* e.g. "mxval-builtin-cuda" */
  const char* build_id;      /* identifies the build (dedup key for results) */
  int32_t num_kernels;
  const mxval_kernel* kernels;
} mxval_kernel_library;

typedef const mxval_kernel_library* (*mxval_get_kernel_library_fn)(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* MXVAL_KERNEL_API_H_ */
