// ThreadSanitizer annotations for Debian's prebuilt Abseil.
//
// absl::Mutex is implemented in libabsl_synchronization.so with its own
// futex-based waiting, and Debian builds it without TSan, so a TSan build of
// mxval would not see our locks at all and would report every guarded field
// as a race. Linked into the TSan executables only (MXVAL_SANITIZE=thread),
// this file interposes the out-of-line Mutex entry points: the executable's
// definitions win over the shared library's for every caller (ours and
// gRPC's), tell TSan about the acquire/release, and forward to the real
// implementation found with dlsym(RTLD_NEXT). Work inside the real calls
// (including absl::Condition evaluation, which may run in another thread) is
// ignored by TSan between the pre/post annotations, as for any annotated lock.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"

namespace {

template <typename Fn>
Fn Real(const char* mangled) {
  void* p = dlsym(RTLD_NEXT, mangled);
  if (p == nullptr) {
    std::fprintf(stderr, "absl_mutex_tsan: %s not found in the Abseil library: update tests/tsan\n", mangled);
    std::abort();
  }
  return reinterpret_cast<Fn>(p);
}

using VoidFn = void (*)(absl::Mutex*);
using BoolFn = bool (*)(absl::Mutex*);
using CondFn = void (*)(absl::Mutex*, const absl::Condition&);
using CondTimeoutFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Duration);

// Mangled names of absl::debian3::Mutex members (Abseil 20220623, Debian 12).
#define MXVAL_ABSL_MUTEX(member) "_ZN4absl7debian35Mutex" member

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("4LockEv"));
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("6UnlockEv"));
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  static const BoolFn real = Real<BoolFn>(MXVAL_ABSL_MUTEX("7TryLockEv"));
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool got = real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_try_lock | (got ? 0 : __tsan_mutex_try_lock_failed), 0);
  return got;
}

void Mutex::ReaderLock() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("10ReaderLockEv"));
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

void Mutex::ReaderUnlock() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("12ReaderUnlockEv"));
  __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

void Mutex::LockWhen(const Condition& cond) {
  static const CondFn real = Real<CondFn>(MXVAL_ABSL_MUTEX("8LockWhenERKNS0_9ConditionE"));
  __tsan_mutex_pre_lock(this, 0);
  real(this, cond);
  __tsan_mutex_post_lock(this, 0, 0);
}

// Held on entry and on return; released while waiting.
void Mutex::Await(const Condition& cond) {
  static const CondFn real = Real<CondFn>(MXVAL_ABSL_MUTEX("5AwaitERKNS0_9ConditionE"));
  __tsan_mutex_pre_unlock(this, 0);
  real(this, cond);
  __tsan_mutex_post_unlock(this, 0);
  __tsan_mutex_pre_lock(this, 0);
  __tsan_mutex_post_lock(this, 0, 0);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const CondTimeoutFn real =
      Real<CondTimeoutFn>(MXVAL_ABSL_MUTEX("16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE"));
  __tsan_mutex_pre_unlock(this, 0);
  const bool met = real(this, cond, timeout);
  __tsan_mutex_post_unlock(this, 0);
  __tsan_mutex_pre_lock(this, 0);
  __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

ABSL_NAMESPACE_END
}  // namespace absl
