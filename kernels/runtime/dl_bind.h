// Binding C entry points of a dlopen'ed vendor library (the CUDA driver,
// NVML) to typed function pointers.
#ifndef MXVAL_KERNELS_RUNTIME_DL_BIND_H_
#define MXVAL_KERNELS_RUNTIME_DL_BIND_H_

#include <dlfcn.h>

#include <initializer_list>

namespace mxval {

// Sets `fn` to the first of `names` that `h` exports (newer names first,
// for entry points a library renamed); false when none is there.
template <typename F>
bool DlBind(void* h, F*& fn, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* p = dlsym(h, n)) {
      fn = reinterpret_cast<F*>(p);
      return true;
    }
  }
  return false;
}

}  // namespace mxval

#endif  // MXVAL_KERNELS_RUNTIME_DL_BIND_H_
