/* A stand-in libcublas.so.13 whose cublasCreate_v2 segfaults. Put first on
 * LD_LIBRARY_PATH of a GPU worker, it makes every task's child die inside
 * the roofline's cuBLAS after the task is checked and timed:
 * scripts/gpu_roofline_crash_check.sh checks that those tasks are still
 * reported with their checks and timings (service/worker/child_results.h). */
#include <signal.h>

int cublasCreate_v2(void** handle) {
  (void)handle;
  raise(SIGSEGV);
  return 0;
}
int cublasDestroy_v2(void* handle) {
  (void)handle;
  return 0;
}
int cublasSetStream_v2(void* handle, void* stream) {
  (void)handle;
  (void)stream;
  return 0;
}
int cublasGemmEx(void) { return 0; }
