// libmxval_task.so: the task child (task_child.h) as a C entry point, for a
// Python kernel library's task child. kernels/python/mxval_pyhost.py runs in
// the library's interpreter, loads this object with ctypes and calls
// mxval_task_child_main with a loader that imports the library and returns
// its kernel table; every other step of the task is mxval's C++ as in the
// mxval binary's `__run-task`.
#include <errno.h>
#include <dlfcn.h>
#include <unistd.h>

#include <iostream>
#include <istream>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mxval/kernel_api.h"
#include "nlohmann/json.hpp"
#include "service/worker/task_child.h"

namespace {

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// A write-only streambuf over a file descriptor: results reach the worker
// as they are flushed (the checkpoint before the roofline, then the whole
// result), so a crash later in the task keeps what was written. Framed (a
// serving child): each flush is one frame, [u32 length, little-endian][bytes].
class FdOutBuf : public std::streambuf {
 public:
  FdOutBuf(int fd, bool framed) : fd_(fd), framed_(framed) { setp(buf_, buf_ + sizeof(buf_)); }
  ~FdOutBuf() override { sync(); }

 protected:
  int_type overflow(int_type ch) override {
    if (FlushBuffer() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return FlushBuffer(); }

 private:
  int FlushBuffer() {
    const size_t n = static_cast<size_t>(pptr() - pbase());
    if (n == 0) return 0;
    if (framed_) {
      const uint32_t len = static_cast<uint32_t>(n);
      const char hdr[4] = {static_cast<char>(len), static_cast<char>(len >> 8), static_cast<char>(len >> 16),
                           static_cast<char>(len >> 24)};
      if (!WriteAll(fd_, hdr, sizeof(hdr))) return -1;
    }
    if (!WriteAll(fd_, pbase(), n)) return -1;
    setp(buf_, buf_ + sizeof(buf_));
    return 0;
  }
  int fd_;
  bool framed_;
  char buf_[1 << 16];
};

std::string ReadAll(int fd) {
  std::string s;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  return s;
}

// Loads the Python library whose verified tree copy is `dir`, whose manifest
// names it `name` and whose tree digest is `sha256`; returns its table, or
// NULL with a message in err.
extern "C" typedef const mxval_kernel_library* (*mxval_task_python_load_fn)(const char* dir, const char* name,
                                                                            const char* sha256, char* err,
                                                                            size_t err_len);

mxval::worker::TaskChildHooks MakeHooks(mxval_task_python_load_fn load, const char* python_env_json);

}  // namespace

extern "C" {

// The version of this entry point's contract; the host refuses another.
__attribute__((visibility("default"))) int mxval_task_api_version(void) { return 2; }

// Runs one task as `mxval __run-task ARGV...` does: the TaskSpec from in_fd,
// the results to out_fd, messages to stderr; returns the exit code.
// `python_env_json`: {"interpreter", "python_version", "torch_version",
// "triton_version", "backend"}, stamped into the result.
__attribute__((visibility("default"))) int mxval_task_child_main(int argc, const char* const* argv, int in_fd,
                                                                 int out_fd, mxval_task_python_load_fn load,
                                                                 const char* python_env_json) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) args.emplace_back(argv[i] != nullptr ? argv[i] : "");
  std::istringstream in(ReadAll(in_fd));
  FdOutBuf buf(out_fd, /*framed=*/false);
  std::ostream out(&buf);
  const int rc = mxval::worker::RunTaskChildMain(args, in, out, std::cerr, MakeHooks(load, python_env_json));
  out.flush();
  return rc;
}

// A serving child (the worker's long-lived Python task child): set up once
// with the flags of `mxval __run-task`, then mxval_task_child_run for each
// task. Returns NULL with the reason on stderr (and *exit_code set) when
// the flags or the device are wrong.
__attribute__((visibility("default"))) void* mxval_task_child_open(int argc, const char* const* argv,
                                                                   mxval_task_python_load_fn load,
                                                                   const char* python_env_json, int* exit_code) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) args.emplace_back(argv[i] != nullptr ? argv[i] : "");
  std::string usage;
  auto child = mxval::worker::TaskChild::Create(args, MakeHooks(load, python_env_json), &usage);
  if (!child.ok() || *child == nullptr) {
    std::cerr << "mxval task child: " << (child.ok() ? "--help is not served" : child.status().message()) << "\n";
    *exit_code = child.ok() ? 2 : mxval::worker::TaskChildExitCode(child.status());
    return nullptr;
  }
  *exit_code = 0;
  return child->release();
}

// Runs the serialized TaskSpec task[0..task_len) and writes its results to
// out_fd as frames ([u32 length][bytes] each, little-endian), then the end
// frame [u32 0][i32 exit code]. Returns the exit code: 0 when the results
// were written; kRetireExitCode when they were but the device faulted, and
// the host must end (the worker starts a new child for the next task).
__attribute__((visibility("default"))) int mxval_task_child_run(void* child, const char* task, size_t task_len,
                                                                int out_fd) {
  auto* c = static_cast<mxval::worker::TaskChild*>(child);
  int rc = 0;
  {
    FdOutBuf buf(out_fd, /*framed=*/true);
    std::ostream out(&buf);
    const absl::Status st = c->Run(std::string(task, task_len), out);
    if (!st.ok()) std::cerr << "mxval task child: " << st.message() << "\n";
    out.flush();
    rc = mxval::worker::TaskChildExitCode(st);
    if (rc == 0 && c->device_faulted()) rc = mxval::worker::kRetireExitCode;
  }
  const uint32_t u = static_cast<uint32_t>(rc);
  const char end[8] = {0, 0, 0, 0, static_cast<char>(u), static_cast<char>(u >> 8), static_cast<char>(u >> 16),
                       static_cast<char>(u >> 24)};
  if (!WriteAll(out_fd, end, sizeof(end))) return 3;
  return rc;
}

__attribute__((visibility("default"))) void mxval_task_child_close(void* child) {
  delete static_cast<mxval::worker::TaskChild*>(child);
}

}  // extern "C"

namespace {

mxval::worker::TaskChildHooks MakeHooks(mxval_task_python_load_fn load, const char* python_env_json) {
  mxval::worker::TaskChildHooks hooks;
  Dl_info info;
  // The built-in GPU kernel libraries sit beside this object (<prefix>/lib).
  if (dladdr(reinterpret_cast<void*>(&mxval_task_child_main), &info) != 0 && info.dli_fname != nullptr) {
    const std::string self = info.dli_fname;
    hooks.builtin_dir = self.substr(0, self.rfind('/'));
  }
  if (load != nullptr) {
    hooks.python_loader = [load](const std::string& dir, const std::string& name,
                                 const std::string& sha256) -> absl::StatusOr<const mxval_kernel_library*> {
      char err[4096] = {};
      const mxval_kernel_library* t = load(dir.c_str(), name.c_str(), sha256.c_str(), err, sizeof(err));
      err[sizeof(err) - 1] = '\0';
      if (t == nullptr) return absl::InvalidArgumentError(err[0] != '\0' ? err : "the loader returned no table");
      return t;
    };
  }
  if (python_env_json != nullptr) {
    const nlohmann::json j = nlohmann::json::parse(python_env_json, nullptr, /*allow_exceptions=*/false);
    auto field = [&](const char* k) -> std::string {
      return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>().substr(0, 256) : "";
    };
    hooks.python.set_interpreter(field("interpreter"));
    hooks.python.set_python_version(field("python_version"));
    hooks.python.set_torch_version(field("torch_version"));
    hooks.python.set_triton_version(field("triton_version"));
    hooks.python.set_backend(field("backend"));
  }
  return hooks;
}

}  // namespace
