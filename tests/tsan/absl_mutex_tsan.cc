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
// Condition variables are covered too: a wait releases the mutex inside the
// library, which TSan must be told about or it reports a double lock.
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
using CvWaitFn = void (*)(absl::CondVar*, absl::Mutex*);
using CvTimeoutFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Duration);
using CvDeadlineFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Time);
using CondDeadlineFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Time);

// Entry points call each other inside the library (WaitWithTimeout calls
// WaitWithDeadline through the PLT, so into this file again): only the
// outermost call on a thread is annotated.
//
// Only calls made from this executable (our code, and inline Abseil code
// compiled into it) are annotated. gRPC's libraries call the same entry
// points on their own mutexes, but their other memory accesses are not
// instrumented and they publish objects through uninstrumented atomics, so
// annotating their locks alone only produces reports about gRPC's internals.
thread_local int depth = 0;
bool FromThisExecutable(const void* caller) {
  static const void* const base = [] {
    Dl_info self;
    return dladdr(reinterpret_cast<const void*>(&FromThisExecutable), &self) ? self.dli_fbase : nullptr;
  }();
  Dl_info info;
  return dladdr(caller, &info) && info.dli_fbase == base;
}
struct Outer {
  explicit Outer(const void* caller) : outer(depth++ == 0 && FromThisExecutable(caller)) {}
  ~Outer() { --depth; }
  const bool outer;
};

// `mu` is released while the real call waits and held again when it returns.
template <typename F>
auto ReleasedDuring(const void* caller, absl::Mutex* mu, unsigned flags, F&& wait) {
  Outer o(caller);
  if (!o.outer) return wait();
  __tsan_mutex_pre_unlock(mu, flags);
  auto r = wait();
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
  __tsan_mutex_post_lock(mu, flags, 0);
  return r;
}

// Taken (exclusively or shared) by the real call, whatever it returns.
template <typename F>
auto Acquiring(const void* caller, absl::Mutex* mu, unsigned flags, F&& lock) {
  Outer o(caller);
  if (!o.outer) return lock();
  __tsan_mutex_pre_lock(mu, flags);
  auto r = lock();
  __tsan_mutex_post_lock(mu, flags, 0);
  return r;
}

// Released by the real call.
template <typename F>
void Releasing(const void* caller, absl::Mutex* mu, unsigned flags, F&& unlock) {
  Outer o(caller);
  if (!o.outer) return unlock();
  __tsan_mutex_pre_unlock(mu, flags);
  unlock();
  __tsan_mutex_post_unlock(mu, flags);
}

// A try-lock: taken only if the real call says so.
template <typename F>
bool Trying(const void* caller, absl::Mutex* mu, unsigned flags, F&& try_lock) {
  Outer o(caller);
  if (!o.outer) return try_lock();
  flags |= __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(mu, flags);
  const bool got = try_lock();
  __tsan_mutex_post_lock(mu, flags | (got ? 0 : __tsan_mutex_try_lock_failed), 0);
  return got;
}
using BoolFn = bool (*)(absl::Mutex*);
using CondFn = void (*)(absl::Mutex*, const absl::Condition&);
using CondTimeoutFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Duration);

// Mangled names of absl::debian3::Mutex / CondVar members (Abseil 20220623, Debian 12).
#define MXVAL_ABSL_MUTEX(member) "_ZN4absl7debian35Mutex" member
#define MXVAL_ABSL_CONDVAR(member) "_ZN4absl7debian37CondVar" member

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("4LockEv"));
  Acquiring(__builtin_return_address(0), this, 0, [&] { real(this); return 0; });
}

void Mutex::Unlock() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("6UnlockEv"));
  Releasing(__builtin_return_address(0), this, 0, [&] { real(this); });
}

bool Mutex::TryLock() {
  static const BoolFn real = Real<BoolFn>(MXVAL_ABSL_MUTEX("7TryLockEv"));
  return Trying(__builtin_return_address(0), this, 0, [&] { return real(this); });
}

void Mutex::ReaderLock() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("10ReaderLockEv"));
  Acquiring(__builtin_return_address(0), this, __tsan_mutex_read_lock, [&] { real(this); return 0; });
}

void Mutex::ReaderUnlock() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("12ReaderUnlockEv"));
  Releasing(__builtin_return_address(0), this, __tsan_mutex_read_lock, [&] { real(this); });
}

void Mutex::LockWhen(const Condition& cond) {
  static const CondFn real = Real<CondFn>(MXVAL_ABSL_MUTEX("8LockWhenERKNS0_9ConditionE"));
  Acquiring(__builtin_return_address(0), this, 0, [&] { real(this, cond); return 0; });
}

bool Mutex::ReaderTryLock() {
  static const BoolFn real = Real<BoolFn>(MXVAL_ABSL_MUTEX("13ReaderTryLockEv"));
  return Trying(__builtin_return_address(0), this, __tsan_mutex_read_lock, [&] { return real(this); });
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const CondTimeoutFn real =
      Real<CondTimeoutFn>(MXVAL_ABSL_MUTEX("19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE"));
  return Acquiring(__builtin_return_address(0), this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static const CondDeadlineFn real =
      Real<CondDeadlineFn>(MXVAL_ABSL_MUTEX("20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE"));
  return Acquiring(__builtin_return_address(0), this, 0, [&] { return real(this, cond, deadline); });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const CondFn real = Real<CondFn>(MXVAL_ABSL_MUTEX("14ReaderLockWhenERKNS0_9ConditionE"));
  Acquiring(__builtin_return_address(0), this, __tsan_mutex_read_lock, [&] { real(this, cond); return 0; });
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const CondTimeoutFn real =
      Real<CondTimeoutFn>(MXVAL_ABSL_MUTEX("25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE"));
  return Acquiring(__builtin_return_address(0), this, __tsan_mutex_read_lock, [&] { return real(this, cond, timeout); });
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static const CondDeadlineFn real =
      Real<CondDeadlineFn>(MXVAL_ABSL_MUTEX("26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE"));
  return Acquiring(__builtin_return_address(0), this, __tsan_mutex_read_lock, [&] { return real(this, cond, deadline); });
}

// Held on entry and on return; released while waiting.
void Mutex::Await(const Condition& cond) {
  static const CondFn real = Real<CondFn>(MXVAL_ABSL_MUTEX("5AwaitERKNS0_9ConditionE"));
  ReleasedDuring(__builtin_return_address(0), this, 0, [&] { real(this, cond); return 0; });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const CondTimeoutFn real =
      Real<CondTimeoutFn>(MXVAL_ABSL_MUTEX("16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE"));
  return ReleasedDuring(__builtin_return_address(0), this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static const CondDeadlineFn real =
      Real<CondDeadlineFn>(MXVAL_ABSL_MUTEX("17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE"));
  return ReleasedDuring(__builtin_return_address(0), this, 0, [&] { return real(this, cond, deadline); });
}

// A destroyed mutex's memory may hold a new one later: forget its state.
Mutex::~Mutex() {
  static const VoidFn real = Real<VoidFn>(MXVAL_ABSL_MUTEX("D2Ev"));
  Outer o(__builtin_return_address(0));
  if (o.outer) __tsan_mutex_destroy(this, 0);
  real(this);
}

// Condition variables release the mutex while waiting (gRPC's gpr_cv is one).
void CondVar::Wait(Mutex* mu) {
  static const CvWaitFn real = Real<CvWaitFn>(MXVAL_ABSL_CONDVAR("4WaitEPNS0_5MutexE"));
  ReleasedDuring(__builtin_return_address(0), mu, 0, [&] { real(this, mu); return 0; });
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static const CvTimeoutFn real = Real<CvTimeoutFn>(MXVAL_ABSL_CONDVAR("15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE"));
  return ReleasedDuring(__builtin_return_address(0), mu, 0, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static const CvDeadlineFn real = Real<CvDeadlineFn>(MXVAL_ABSL_CONDVAR("16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE"));
  return ReleasedDuring(__builtin_return_address(0), mu, 0, [&] { return real(this, mu, deadline); });
}

ABSL_NAMESPACE_END
}  // namespace absl
