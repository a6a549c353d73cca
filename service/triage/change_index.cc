#include "service/triage/change_index.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "re2/re2.h"

namespace mxval {
namespace triage {
namespace {

std::vector<std::string> Parts(absl::string_view path, char sep) {
  std::vector<std::string> out;
  for (absl::string_view p : absl::StrSplit(path, sep)) {
    if (p.empty() || p == ".") continue;
    out.emplace_back(p);
  }
  return out;
}

int CommonSuffix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  int k = 0;
  while (k < static_cast<int>(a.size()) && k < static_cast<int>(b.size()) &&
         a[a.size() - 1 - k] == b[b.size() - 1 - k])
    ++k;
  return k;
}

// A changed function's name is evidence on its own only when it is unlikely
// to name something else in the log.
bool DistinctiveFunction(const std::string& f) {
  static const std::set<std::string> kGeneric = {
      "forward", "__init__", "__call__", "main", "run", "apply", "setUp", "tearDown", "setUpClass",
      "tearDownClass", "test", "build", "init", "load", "save", "get", "set", "update", "process", "execute",
      "create", "start", "stop", "close", "wrapper", "decorator", "inner", "helper", "__repr__", "__str__",
      "__enter__", "__exit__", "__post_init__", "__getattr__", "launch", "setup", "configure", "handle"};
  if (kGeneric.count(f)) return false;
  return f.size() >= 8 || (f.size() >= 6 && f.find('_') != std::string::npos);
}

bool ArchLike(absl::string_view t) {
  static const RE2 re(R"((?i)^(?:mi\d+\w*|gfx\d+\w*|sm_?\d+\w*|[abhl]\d{2,3}\w*|rtx\w*|gb\d+\w*|navi\d*|rdna\d*|cdna\d*)$)");
  return RE2::FullMatch(re2::StringPiece(t.data(), t.size()), re);
}

bool TableFile(absl::string_view path) {
  const std::string lower = absl::AsciiStrToLower(path);
  if (!(absl::EndsWith(lower, ".json") || absl::EndsWith(lower, ".csv") || absl::EndsWith(lower, ".yaml") ||
        absl::EndsWith(lower, ".yml")))
    return false;
  return absl::StrContains(lower, "config") || absl::StrContains(lower, "tune") || absl::StrContains(lower, "tuning");
}

// Lower-cased letters and digits only: "PerTokenGroupQuant8bit" and
// "per_token_group_quant_8bit" squash to the same word.
std::string Squash(absl::string_view s) {
  std::string out;
  for (char c : s)
    if (absl::ascii_isalnum(c)) out.push_back(absl::ascii_tolower(c));
  return out;
}

bool SourceFile(absl::string_view path) {
  static const std::set<std::string> kExt = {"py", "cu", "cuh", "cc", "cpp", "cxx", "c", "h", "hpp", "hip", "pyx"};
  const size_t dot = path.rfind('.');
  return dot != absl::string_view::npos && kExt.count(std::string(path.substr(dot + 1))) > 0;
}

}  // namespace

bool GenericBasename(absl::string_view name) {
  static const std::set<std::string> kGeneric = {
      "__init__.py", "__main__.py", "utils.py", "util.py", "common.py", "config.py", "main.py", "setup.py",
      "conftest.py", "base.py", "model.py", "models.py", "layers.py", "test.py", "run.py", "server.py", "api.py",
      "types.py", "constants.py", "CMakeLists.txt", "README.md", "Makefile", "requirements.txt", "pyproject.toml",
      "setup.cfg", "index.js", "index.ts", "helpers.py", "version.py", "env.py", "envs.py", "logger.py",
      "kernel.cu", "kernels.cu", "utils.h", "utils.cc", "utils.cpp", "common.h", "main.cc", "main.cpp"};
  return kGeneric.count(std::string(name)) > 0;
}

ChangeIndex::ChangeIndex(const std::vector<std::string>& changed, const PrDiff* diff) : diff_(diff) {
  std::map<std::string, int> seen;
  auto add = [&](const std::string& path) -> int {
    std::string p = path;
    while (absl::StartsWith(p, "./")) p.erase(0, 2);
    if (p.empty()) return -1;
    auto it = seen.find(p);
    if (it != seen.end()) return it->second;
    ChangedFile f;
    f.path = p;
    f.parts = Parts(p, '/');
    if (f.parts.empty()) return -1;
    const int idx = static_cast<int>(files_.size());
    seen[p] = idx;
    by_basename_.emplace(f.parts.back(), idx);
    if (absl::EndsWith(f.parts.back(), ".py")) {
      by_module_tail_.emplace(f.parts.back().substr(0, f.parts.back().size() - 3), idx);
    }
    files_.push_back(std::move(f));
    return idx;
  };
  if (diff != nullptr) {
    for (const DiffFile& d : diff->files) {
      const int i = add(d.path);
      if (i < 0) continue;
      ChangedFile& f = files_[i];
      f.diff = &d;
      f.added = d.added;
      f.deleted = d.deleted;
      if (d.renamed && d.old_path != d.path) add(d.old_path);  // the old name is gone: a change too
      for (const std::string& k : d.kernels) symbols_.emplace(k, std::make_pair(Symbol::kKernel, i));
      for (const std::string& fn : d.functions)
        if (DistinctiveFunction(fn) && !d.kernels.count(fn)) symbols_.emplace(fn, std::make_pair(Symbol::kFunction, i));
      for (const std::string& fl : d.flags) symbols_.emplace(fl, std::make_pair(Symbol::kFlag, i));
      for (const std::string& e : d.env) symbols_.emplace(e, std::make_pair(Symbol::kEnv, i));
    }
  }
  for (const std::string& c : changed) add(c);
  for (int i = 0; i < static_cast<int>(files_.size()); ++i) {
    const ChangedFile& f = files_[i];
    if (SourceFile(f.path) && stems_.size() < 5000) {
      const std::string stem = Squash(f.parts.back().substr(0, f.parts.back().rfind('.')));
      if (stem.size() >= 8) stems_.emplace_back(stem, i);
    }
    if (!TableFile(f.path)) continue;
    std::string stem = f.parts.back();
    stem = stem.substr(0, stem.rfind('.'));
    for (absl::string_view part : absl::StrSplit(stem, absl::ByAnyChar("-=. "))) {
      const std::string t = absl::AsciiStrToLower(part);
      bool letters = false;
      for (char ch : t) letters = letters || absl::ascii_isalpha(ch);
      if (t.size() < 6 || !letters || ArchLike(t) || t == "config" || t == "configs" || t == "tuned") continue;
      if (table_ops_.size() < 64) table_ops_.emplace_back(t, i);
    }
  }
}

ChangeIndex::PathHit ChangeIndex::MatchPath(absl::string_view path) const {
  PathHit best;
  const std::vector<std::string> parts = Parts(path, '/');
  if (parts.empty()) return best;
  // An installed path names its package right after site-/dist-packages:
  // .../dist-packages/vllm/x/y.py is not python/sglang/x/y.py.
  std::string package;
  for (size_t i = 0; i + 1 < parts.size(); ++i)
    if (parts[i] == "site-packages" || parts[i] == "dist-packages") package = parts[i + 1];
  auto range = by_basename_.equal_range(parts.back());
  int examined = 0;
  for (auto it = range.first; it != range.second && examined < kMaxCandidates; ++it, ++examined) {
    const ChangedFile& f = files_[it->second];
    if (!package.empty() && std::find(f.parts.begin(), f.parts.end(), package) == f.parts.end()) continue;
    const int k = CommonSuffix(parts, f.parts);
    const bool whole = k == static_cast<int>(f.parts.size());
    const bool ok = k >= 2 || whole || (k == 1 && !GenericBasename(f.parts.back()));
    if (ok && (k > best.common || (k == best.common && whole && !best.whole))) best = {it->second, k, whole};
  }
  return best;
}

ChangeIndex::PathHit ChangeIndex::MatchModule(absl::string_view dotted) const {
  PathHit best;
  std::vector<std::string> parts = Parts(dotted, '.');
  // "pkg.mod.Class.method": try the module at each of the last three positions.
  for (int drop = 0; drop < 3 && parts.size() >= 2; ++drop) {
    auto range = by_module_tail_.equal_range(parts.back());
    int examined = 0;
    for (auto it = range.first; it != range.second && examined < kMaxCandidates; ++it, ++examined) {
      const ChangedFile& f = files_[it->second];
      std::vector<std::string> fp = f.parts;
      fp.back() = fp.back().substr(0, fp.back().size() - 3);
      if (fp.back() == "__init__") fp.pop_back();
      const int k = CommonSuffix(parts, fp);
      if (k >= 2 && k > best.common) best = {it->second, k, k == static_cast<int>(fp.size())};
    }
    if (best.file >= 0) break;
    parts.pop_back();
  }
  return best;
}

void ChangeIndex::MatchWord(absl::string_view word, std::vector<SymbolHit>* out) const {
  auto range = symbols_.equal_range(std::string(word));
  for (auto it = range.first; it != range.second; ++it) out->push_back({it->second.first, it->second.second, it->first});
}

void ChangeIndex::MatchTableOps(absl::string_view lower_token, std::vector<SymbolHit>* out) const {
  for (const auto& [op, file] : table_ops_)
    if (absl::StrContains(lower_token, op)) out->push_back({Symbol::kTableOp, file, op});
}

int ChangeIndex::MatchTestName(absl::string_view name) const {
  std::string n = Squash(name);
  for (const char* affix : {"tests", "test"}) {
    if (absl::StartsWith(n, affix)) n.erase(0, strlen(affix));
    if (absl::EndsWith(n, affix)) n.resize(n.size() - strlen(affix));
  }
  if (n.size() < 8) return -1;
  for (const auto& [stem, file] : stems_) {
    if (stem == n) return file;
    const size_t shorter = std::min(stem.size(), n.size());
    if (shorter >= 10 && (absl::StrContains(stem, n) || absl::StrContains(n, stem))) return file;
  }
  return -1;
}

bool ChangeIndex::NamesComponent(absl::string_view component) const {
  if (component.empty()) return false;
  for (const ChangedFile& f : files_)
    for (size_t i = 0; i + 1 < f.parts.size(); ++i)
      if (f.parts[i] == component) return true;
  return false;
}

bool ChangeIndex::ChangesFunction(int file, const std::string& function) const {
  if (file < 0 || file >= static_cast<int>(files_.size()) || files_[file].diff == nullptr) return false;
  return files_[file].diff->functions.count(function) > 0;
}

}  // namespace triage
}  // namespace mxval
