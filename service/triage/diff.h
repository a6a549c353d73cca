// A pull request's unified diff, read for log triage: which files it adds,
// deletes, renames or changes, which functions it changes, and which
// command-line flags, environment switches and kernels it introduces.
//
// Accepts `git diff` output (with `diff --git`, `new file mode`, `rename
// from/to`, binary markers) and plain `diff -u` output. Hunk bodies are
// walked by their line counts, so a content line that starts with "--- "
// is never taken for a header. What is extracted is heuristic by nature
// (a flag is a quoted "--word-word" on an added line, an environment
// switch an ALL_CAPS_NAME on an added line that reads the environment);
// each item is evidence only when the failing job's log names it too.
#ifndef MXVAL_SERVICE_TRIAGE_DIFF_H_
#define MXVAL_SERVICE_TRIAGE_DIFF_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mxval {
namespace triage {

struct DiffLimits {
  size_t max_bytes = 32 << 20;
  int max_files = 100000;
  int max_symbols_per_file = 2000;  // functions, flags, env switches, kernels
  size_t max_line_bytes = 4096;     // longer lines are read on their first bytes
};

struct DiffFile {
  std::string path;      // the path after the change (before it, for a deletion)
  std::string old_path;  // the path before the change; differs for a rename
  bool added = false;
  bool deleted = false;
  bool renamed = false;
  bool binary = false;
  int added_lines = 0;
  int removed_lines = 0;
  // Functions and classes whose body or signature the diff changes (from
  // hunk headers, definitions on changed lines and the enclosing
  // definition of each changed line).
  std::set<std::string> functions;
  // Kernels the diff defines or changes: `@triton.jit`-decorated
  // functions, `__global__` functions.
  std::set<std::string> kernels;
  // "--enable-foo" (and the attribute form "enable_foo") on added lines,
  // absent from the removed lines.
  std::set<std::string> flags;
  // Environment switches read or set on added lines, absent from removed lines.
  std::set<std::string> env;
};

struct PrDiff {
  std::vector<DiffFile> files;
};

// INVALID_ARGUMENT for text over max_bytes or more than max_files files,
// and for text that is not a diff at all (no file header). Malformed hunks
// end the file they are in; what was read before stays.
absl::StatusOr<PrDiff> ParseUnifiedDiff(absl::string_view text, const DiffLimits& limits = {});

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_DIFF_H_
