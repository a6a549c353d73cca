/* A minimal external kernel library for the mxval kernel ABI: one naive CPU
 * kernel, in plain C. Build it as a shared object and point mxval at it:
 *
 *   cc -O2 -shared -fPIC -I kernels/include example_plugin.c -o libexample.so
 *
 * With -DMXVAL_EXAMPLE_RAGGED_K_BUG it reproduces a real shipped bug: a mask
 * that only covers the first half of K when K = 192. The tests validate both
 * builds and expect the buggy one to fail. -DMXVAL_EXAMPLE_CRASH (segfault) and
 * -DMXVAL_EXAMPLE_HANG (never returns) builds exercise the worker's isolation.
 * Builds that break one promise of kernel_api.h each, for the harness's checks:
 * -DMXVAL_EXAMPLE_Y_OVERRUN (writes one element past the end of y),
 * -DMXVAL_EXAMPLE_Y_UNDERRUN (one element before y), -DMXVAL_EXAMPLE_WS_UNINIT
 * (accumulates into its workspace as if it were zeroed on entry) and
 * -DMXVAL_EXAMPLE_WS_OVERRUN (writes past the end of its workspace),
 * -DMXVAL_EXAMPLE_DENSE_X (reads x as if x_stride_k were 1),
 * -DMXVAL_EXAMPLE_NAN_SCALE (reads the NaN scale 0xFF as the largest scale, 2^127) and
 * -DMXVAL_EXAMPLE_DECLINE_STRIDED (declines x_stride_k != 1 in can_implement
 * and computes garbage if run anyway: the harness must ask first).
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "mxval/kernel_api.h"

static float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static float e2m1(unsigned code) {
  static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8u) ? -mag[code & 7u] : mag[code & 7u];
}

#ifdef MXVAL_EXAMPLE_NAN_SCALE
/* The bug: the exponent clamped to the largest finite scale, so 0xFF reads as 2^127, not NaN. */
static float e8m0(uint8_t s) { return ldexpf(1.0f, (s > 254 ? 254 : (int)s) - 127); }
#else
static float e8m0(uint8_t s) { return s == 0xFF ? NAN : ldexpf(1.0f, (int)s - 127); }
#endif

static int32_t can_implement(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
  (void)c;
  if (a->activations != MXVAL_ACT_BF16) {
    snprintf(err, len, "example_naive supports bf16 activations only");
    return 1;
  }
  if (a->K % 32 != 0) {
    snprintf(err, len, "K must be a multiple of 32");
    return 1;
  }
#ifdef MXVAL_EXAMPLE_DECLINE_STRIDED
  if (a->x_stride_k != 1) {
    snprintf(err, len, "example_naive (this build) needs x_stride_k == 1, got %lld", (long long)a->x_stride_k);
    return 1;
  }
#endif
  return 0;
}

static size_t workspace_size(const mxval_gemm_args* a, const mxval_tile_config* c) {
  (void)c;
#if defined(MXVAL_EXAMPLE_WS_UNINIT)
  return (size_t)(a->B * a->M * a->N) * sizeof(float);
#elif defined(MXVAL_EXAMPLE_WS_OVERRUN)
  (void)a;
  return 64;
#else
  (void)a;
  return 0;
#endif
}

#if defined(MXVAL_EXAMPLE_CRASH_ONCE) || defined(MXVAL_EXAMPLE_FLAKY_ONCE)
/* 1 the first time this is called for a marker directory, 0 afterwards. */
static int first_time(const char* what) {
  const char* dir = getenv("MXVAL_EXAMPLE_MARKER_DIR");
  if (dir == NULL) return 0;
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s.marker", dir, what);
  const int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) return 0;
  close(fd);
  return 1;
}
#endif

static int32_t run(const mxval_gemm_args* a, const mxval_tile_config* c, char* err, size_t len) {
#if defined(MXVAL_EXAMPLE_DENSE_X) || defined(MXVAL_EXAMPLE_DECLINE_STRIDED)
  const int64_t x_stride_k = 1; /* the bug (or, declined, what a caller that never asked would get) */
#else
  const int64_t x_stride_k = a->x_stride_k;
#endif
#ifndef MXVAL_EXAMPLE_DECLINE_STRIDED
  if (can_implement(a, c, err, len) != 0) return 1;
#endif
  float out_scale = 1.0f;
#ifdef MXVAL_EXAMPLE_WRONG
  out_scale = 2.0f;
#endif
#ifdef MXVAL_EXAMPLE_CRASH_ONCE
  if (first_time("crash_once")) raise(SIGSEGV);
#endif
#ifdef MXVAL_EXAMPLE_FLAKY_ONCE
  if (first_time("flaky_once")) out_scale = 2.0f;
#endif
#ifdef MXVAL_EXAMPLE_CRASH
  raise(SIGSEGV);
#endif
#ifdef MXVAL_EXAMPLE_HANG
  for (;;) pause();
#endif
  const uint16_t* x = (const uint16_t*)a->x;
  uint16_t* y = (uint16_t*)a->y;
  int64_t k_end = a->K;
#ifdef MXVAL_EXAMPLE_RAGGED_K_BUG
  if (a->K == 192) k_end = 96; /* the bug: tail block masked away */
#endif
  for (int64_t b = 0; b < a->B; ++b)
    for (int64_t m = 0; m < a->M; ++m)
      for (int64_t n = 0; n < a->N; ++n) {
        const uint8_t* wp = a->w_packed + b * a->w_packed_stride_b + n * a->w_packed_stride_n;
        const uint8_t* ws = a->w_scales + b * a->w_scales_stride_b + n * a->w_scales_stride_n;
        float acc = 0.0f;
#ifdef MXVAL_EXAMPLE_NAN_SCALE
        /* Scaled per 32-group after its dot, as fast kernels do: with the
         * clamped decode a NaN-scale group gives +-Inf or a huge finite value. */
        float part = 0.0f;
        for (int64_t k = 0; k < k_end; ++k) {
          const unsigned code = (k & 1) ? (wp[k / 2] >> 4) : (wp[k / 2] & 15u);
          part += bf16_to_float(x[b * a->x_stride_b + m * a->x_stride_m + k * x_stride_k]) * e2m1(code);
          if (k % 32 == 31) acc += part * e8m0(ws[k / 32]), part = 0.0f;
        }
#else
        for (int64_t k = 0; k < k_end; ++k) {
          const unsigned code = (k & 1) ? (wp[k / 2] >> 4) : (wp[k / 2] & 15u);
          acc += bf16_to_float(x[b * a->x_stride_b + m * a->x_stride_m + k * x_stride_k]) * e2m1(code) * e8m0(ws[k / 32]);
        }
#endif
#ifdef MXVAL_EXAMPLE_WS_UNINIT
        float* partial = (float*)a->workspace + (b * a->M + m) * a->N + n;
        *partial += acc; /* the bug: the workspace is not zeroed on entry */
        acc = *partial;
#endif
        y[b * a->y_stride_b + m * a->y_stride_m + n] = float_to_bf16(acc * out_scale);
      }
#ifdef MXVAL_EXAMPLE_WS_OVERRUN
  ((uint8_t*)a->workspace)[a->workspace_bytes] = 0; /* one byte past the end */
#endif
#if defined(MXVAL_EXAMPLE_Y_OVERRUN) || defined(MXVAL_EXAMPLE_Y_UNDERRUN)
  {
    /* The farthest element in range, then one step beyond it (or before y). */
    const int64_t last = (a->B - 1) * a->y_stride_b + (a->M - 1) * a->y_stride_m + (a->N - 1);
#ifdef MXVAL_EXAMPLE_Y_OVERRUN
    y[last + 1] = y[last];
#else
    y[-1] = y[0];
#endif
  }
#endif
  return 0;
}

static const mxval_tile_config kConfigs[] = {{1, 1, 32, 1, 1, 1}};
static const mxval_kernel kKernels[] = {
    {"example_naive", MXVAL_DEVICE_CPU, "cpu", 1u << MXVAL_ACT_BF16, kConfigs, 1, can_implement, workspace_size, run}};
static const mxval_kernel_library kLibrary = {MXVAL_KERNEL_ABI_VERSION, "example-plugin",
#if defined(MXVAL_EXAMPLE_RAGGED_K_BUG)
                                              "example-buggy-1",
#elif defined(MXVAL_EXAMPLE_WRONG)
                                              "example-wrong-1",
#elif defined(MXVAL_EXAMPLE_CRASH_ONCE)
                                              "example-crash-once-1",
#elif defined(MXVAL_EXAMPLE_FLAKY_ONCE)
                                              "example-flaky-once-1",
#elif defined(MXVAL_EXAMPLE_Y_OVERRUN) || defined(MXVAL_EXAMPLE_Y_UNDERRUN) || defined(MXVAL_EXAMPLE_WS_UNINIT) || \
    defined(MXVAL_EXAMPLE_WS_OVERRUN) || defined(MXVAL_EXAMPLE_DENSE_X) || defined(MXVAL_EXAMPLE_NAN_SCALE) || \
    defined(MXVAL_EXAMPLE_DECLINE_STRIDED)
                                              "example-broken-promise-1",
#else
                                              "example-1",
#endif
                                              1, kKernels};

__attribute__((visibility("default"))) const mxval_kernel_library* mxval_get_kernel_library(void) { return &kLibrary; }
