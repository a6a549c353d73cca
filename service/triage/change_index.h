// What a pull request changed, indexed for matching against the words of a
// CI log: changed files by path suffix (CI prints installed paths, e.g.
// /opt/venv/lib/python3.12/site-packages/pkg/srt/x.py for python/pkg/srt/x.py),
// Python module paths of changed files, and the functions, kernels, flags,
// environment switches and tuning-table ops the diff names.
#ifndef MXVAL_SERVICE_TRIAGE_CHANGE_INDEX_H_
#define MXVAL_SERVICE_TRIAGE_CHANGE_INDEX_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "service/triage/diff.h"

namespace mxval {
namespace triage {

struct ChangedFile {
  std::string path;
  std::vector<std::string> parts;  // path components
  bool added = false;
  bool deleted = false;
  const DiffFile* diff = nullptr;  // null when only the file list named it
};

class ChangeIndex {
 public:
  // Changed files compared per log token: a change of thousands of files
  // with one basename is matched on its first kMaxCandidates.
  static constexpr int kMaxCandidates = 64;
  // `diff` (may be null) must outlive the index; its files join `changed`.
  ChangeIndex(const std::vector<std::string>& changed, const PrDiff* diff);

  struct PathHit {
    int file = -1;       // index into files(); -1: no match
    int common = 0;      // trailing path components shared
    bool whole = false;  // every component of the changed path matched
  };
  // A path as the log spells it ("/opt/.../pkg/srt/x.py", "x.py"). Two
  // shared trailing components match; one matches when it is the changed
  // path itself or a basename too distinctive to be another file's
  // (not __init__.py, utils.py, ...). An installed path matches only a
  // changed path of its package (the directory after site-/dist-packages).
  PathHit MatchPath(absl::string_view path) const;
  // A dotted module path ("pkg.srt.layers.x", "pkg.srt.layers.x.Class"):
  // at least two trailing module components of a changed .py file.
  PathHit MatchModule(absl::string_view dotted) const;

  enum class Symbol { kKernel, kFunction, kFlag, kEnv, kTableOp };
  struct SymbolHit {
    Symbol kind;
    int file;
    std::string name;
  };
  // Exact names: kernels, distinctive changed functions, flags
  // ("--enable-x" or "enable_x"), environment switches.
  void MatchWord(absl::string_view word, std::vector<SymbolHit>* out) const;
  // Ops of changed tuning tables ("gemm_afp4wfp4" for
  // configs/gemm/gemm_afp4wfp4-N=7168-K=2048.json) inside a lower-cased token.
  void MatchTableOps(absl::string_view lower_token, std::vector<SymbolHit>* out) const;
  // A changed source file a test is named for: "test_quant_8bit",
  // "Quant8bitTest" and "quant_8bit" all name quant_8bit.cu (names are
  // compared lower-cased without separators, a "test" prefix or suffix
  // dropped; one may contain the other when the shorter has 10 characters).
  // -1: none.
  int MatchTestName(absl::string_view name) const;
  // Whether some changed path has `component` as one of its directories.
  bool NamesComponent(absl::string_view component) const;
  // Whether the diff changes `function` in files()[file].
  bool ChangesFunction(int file, const std::string& function) const;

  const std::vector<ChangedFile>& files() const { return files_; }
  bool empty() const { return files_.empty(); }
  bool has_diff() const { return diff_ != nullptr; }

 private:
  std::vector<ChangedFile> files_;
  const PrDiff* diff_;
  std::multimap<std::string, int> by_basename_;
  std::multimap<std::string, int> by_module_tail_;  // last component of a .py file without ".py"
  std::multimap<std::string, std::pair<Symbol, int>> symbols_;
  std::vector<std::pair<std::string, int>> table_ops_;
  std::vector<std::pair<std::string, int>> stems_;  // squashed stems of changed source files
};

// Basenames shared by many files in any project ("__init__.py", "utils.py"):
// a match on them alone is no evidence.
bool GenericBasename(absl::string_view name);

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_CHANGE_INDEX_H_
