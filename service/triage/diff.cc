#include "service/triage/diff.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "re2/re2.h"

namespace mxval {
namespace triage {
namespace {

// "a/x/y.py" -> "x/y.py"; strips quotes git adds around unusual names;
// "/dev/null" stays.
std::string CleanPath(absl::string_view p, bool strip_side = true) {
  p = absl::StripAsciiWhitespace(p);
  const size_t tab = p.find('\t');  // diff -u appends a timestamp after a tab
  if (tab != absl::string_view::npos) p = p.substr(0, tab);
  if (p.size() >= 2 && p.front() == '"' && p.back() == '"') p = p.substr(1, p.size() - 2);
  if (p == "/dev/null") return std::string(p);
  if (strip_side && (absl::StartsWith(p, "a/") || absl::StartsWith(p, "b/"))) p.remove_prefix(2);
  return std::string(p);
}

// "diff --git a/x b/x": the b/ path. Names with spaces are ambiguous here;
// the ---/+++ lines that follow settle them.
std::string GitHeaderPath(absl::string_view rest) {
  const size_t b = rest.rfind(" b/");
  if (b != absl::string_view::npos) return CleanPath(rest.substr(b + 1));
  return CleanPath(rest);
}

// Parses "@@ -a,b +c,d @@ context": the old and new line counts and the context.
bool ParseHunkHeader(absl::string_view line, int64_t* old_count, int64_t* new_count, absl::string_view* context) {
  static const RE2 kHunk(R"(^@@+ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@+ ?(.*)$)");
  re2::StringPiece oc, nc, ctx;
  if (!RE2::FullMatch(re2::StringPiece(line.data(), line.size()), kHunk, &oc, &nc, &ctx)) return false;
  *old_count = oc.empty() ? 1 : std::strtoll(std::string(oc).c_str(), nullptr, 10);
  *new_count = nc.empty() ? 1 : std::strtoll(std::string(nc).c_str(), nullptr, 10);
  *context = absl::string_view(ctx.data(), ctx.size());
  return true;
}

// The function or class a line defines, if any: Python's def/class; for
// C-family files (c_family) also a definition's shape, never a call
// ("raise E(", "if isinstance(", "return f(" define nothing).
std::string DefinedName(absl::string_view line, bool c_family) {
  static const RE2 kPy(R"(^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*))");
  static const RE2 kC(
      R"(^\s*(?:template\s*<[^>]*>\s*)?(?:(?:static|inline|__global__|__device__|__host__|__launch_bounds__\([^)]*\)|extern|constexpr|virtual|[\w:<>,*&]+)\s+)+\**&?([A-Za-z_]\w*(?:::[A-Za-z_~]\w*)*)\s*\([^;]*$)");
  std::string name;
  re2::StringPiece sp(line.data(), line.size());
  if (RE2::PartialMatch(sp, kPy, &name)) return name;
  if (c_family && RE2::PartialMatch(sp, kC, &name)) {
    const size_t colons = name.rfind("::");
    if (colons != std::string::npos) name = name.substr(colons + 2);
    static const std::set<std::string> kKeywords = {"if", "for", "while", "switch", "return", "sizeof", "catch",
                                                    "else", "do", "case", "new", "delete", "throw"};
    if (!kKeywords.count(name)) return name;
  }
  return "";
}

// The enclosing definition git prints after a hunk header ("def f(x):",
// "class C:", "void f(int)"): its name.
std::string ContextName(absl::string_view ctx, bool c_family) {
  std::string n = DefinedName(ctx, c_family);
  if (!n.empty() || !c_family) return n;
  static const RE2 kCall(R"(([A-Za-z_]\w*)\s*\()");
  re2::StringPiece sp(ctx.data(), ctx.size());
  std::string last, m;
  while (RE2::FindAndConsume(&sp, kCall, &m)) {
    last = m;
    break;  // the first call-like name of a definition line is its name
  }
  return last;
}

bool IsKernelDecorator(absl::string_view line) {
  static const RE2 kDeco(R"(^\s*@\s*(?:triton\.(?:jit|autotune|heuristics)|tl\.core\.extern|jit)\b)");
  return RE2::PartialMatch(re2::StringPiece(line.data(), line.size()), kDeco);
}

bool CFamily(absl::string_view path) {
  for (const char* ext : {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".hip", ".inl"})
    if (absl::EndsWith(path, ext)) return true;
  return false;
}

bool IsGlobalKernel(absl::string_view line) { return absl::StrContains(line, "__global__"); }

// Triton and CUDA kernels are conventionally named "..._kernel" / "kernel_...".
bool NameLooksKernel(absl::string_view name) { return absl::StrContains(absl::AsciiStrToLower(name), "kernel"); }

struct FileState {
  DiffFile file;
  std::set<std::string> removed_flags, removed_env;
  bool pending_kernel_decorator = false;  // a kernel decorator was seen; the next def is a kernel
  std::string enclosing;                  // the definition the walk is inside
  bool enclosing_kernel = false;          // ... and it is a kernel
  bool in_flag_definition = false;        // an add_argument( whose flag string is on the next line
  bool in_env_definition = false;         // an environment read whose name is on the next line
  bool c_family = false;                  // C, C++, CUDA, HIP: definitions have no keyword
  std::string hunk_function;              // the function the hunk header names
};

void AddBounded(std::set<std::string>* s, const std::string& v, const DiffLimits& l) {
  if (!v.empty() && static_cast<int>(s->size()) < l.max_symbols_per_file) s->insert(v);
}

void ScanEnv(absl::string_view line, bool added, FileState* st, const DiffLimits& l);

void ScanSymbols(absl::string_view line, bool added, FileState* st, const DiffLimits& l) {
  // A flag is introduced where it is defined (argparse, click, gflags), not
  // where a command line uses it.
  static const RE2 kFlag(R"re(["'](--[a-z][a-z0-9]*(?:[-_][a-z0-9]+)+)["'])re");
  static const RE2 kFlagContext(R"((?i)(add_argument|add_option|option\(|argument\(|flag\())");
  static const RE2 kGflag(R"(\bDEFINE_(?:bool|int32|int64|uint32|uint64|string|double)\(\s*(\w+))");
  re2::StringPiece sp(line.data(), line.size());
  std::string m;
  re2::StringPiece scan = sp;
  if (RE2::PartialMatch(sp, kGflag, &m)) {
    const std::string flag = absl::StrCat("--", m);
    if (added) {
      AddBounded(&st->file.flags, flag, l);
      AddBounded(&st->file.flags, m, l);
    } else {
      st->removed_flags.insert(flag);
      st->removed_flags.insert(m);
    }
  }
  const bool context = RE2::PartialMatch(sp, kFlagContext);
  if (!context && !st->in_flag_definition) return ScanEnv(line, added, st, l);
  st->in_flag_definition = false;
  int found = 0;
  while (RE2::FindAndConsume(&scan, kFlag, &m)) {
    ++found;
    if (added) {
      AddBounded(&st->file.flags, m, l);
      AddBounded(&st->file.flags, absl::StrReplaceAll(m.substr(2), {{"-", "_"}}), l);
    } else {
      st->removed_flags.insert(m);
      st->removed_flags.insert(absl::StrReplaceAll(m.substr(2), {{"-", "_"}}));
    }
  }
  st->in_flag_definition = context && found == 0;  // "add_argument(" with the flag on the next line
  ScanEnv(line, added, st, l);
}

void ScanEnv(absl::string_view line, bool added, FileState* st, const DiffLimits& l) {
  static const RE2 kEnv(R"(\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b)");
  static const RE2 kEnvContext(R"((?i)(environ|getenv|\benv\b|envs\.|env_var|export\s|Env(?:Bool|Int|Str|Float)\b|setenv))");
  re2::StringPiece sp(line.data(), line.size());
  std::string m;
  re2::StringPiece scan;
  const bool context = RE2::PartialMatch(sp, kEnvContext);
  if (context || st->in_env_definition) {
    st->in_env_definition = false;
    int found = 0;
    scan = sp;
    while (RE2::FindAndConsume(&scan, kEnv, &m)) {
      if (m.size() < 6) continue;
      ++found;
      if (added) AddBounded(&st->file.env, m, l);
      else st->removed_env.insert(m);
    }
    st->in_env_definition = context && found == 0;  // "get_env(" with the name on the next line
  }
}

// Flags and switches the old side already had are not introduced.
void Finish(FileState* st, PrDiff* out) {
  for (const std::string& f : st->removed_flags) st->file.flags.erase(f);
  for (const std::string& e : st->removed_env) st->file.env.erase(e);
  if (!st->file.path.empty()) out->files.push_back(std::move(st->file));
  *st = FileState();
}

}  // namespace

absl::StatusOr<PrDiff> ParseUnifiedDiff(absl::string_view text, const DiffLimits& l) {
  if (text.size() > l.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("diff: ", text.size(), " bytes (at most ", l.max_bytes, ")"));
  }
  PrDiff out;
  FileState st;
  bool in_file = false;
  int64_t old_left = 0, new_left = 0;  // lines left in the current hunk
  size_t pos = 0;
  auto next_line = [&](absl::string_view* line) {
    if (pos >= text.size()) return false;
    size_t e = text.find('\n', pos);
    if (e == absl::string_view::npos) e = text.size();
    *line = text.substr(pos, e - pos);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    if (line->size() > l.max_line_bytes) *line = line->substr(0, l.max_line_bytes);
    pos = e + 1;
    return true;
  };
  auto start_file = [&](std::string path) -> absl::Status {
    if (in_file) Finish(&st, &out);
    if (static_cast<int>(out.files.size()) >= l.max_files) {
      return absl::InvalidArgumentError(absl::StrCat("diff: more than ", l.max_files, " files"));
    }
    in_file = true;
    st.file.path = path;
    st.file.old_path = path;
    old_left = new_left = 0;
    return absl::OkStatus();
  };
  absl::string_view line;
  bool saw_header = false;
  while (next_line(&line)) {
    if (old_left > 0 || new_left > 0) {  // inside a hunk
      const char c = line.empty() ? ' ' : line[0];
      const absl::string_view body = line.empty() ? line : line.substr(1);
      if (c == '\\') continue;  // "\ No newline at end of file"
      if (c != ' ' && c != '+' && c != '-') {
        old_left = new_left = 0;  // malformed: the hunk ends here; the line is read as a header below
      } else {
        if (c != '+') --old_left;
        if (c != '-') --new_left;
        if (IsKernelDecorator(body)) st.pending_kernel_decorator = true;
        const std::string defined = DefinedName(body, st.c_family);
        if (!defined.empty()) {
          st.enclosing = defined;
          st.hunk_function.clear();
          st.enclosing_kernel = st.pending_kernel_decorator || IsGlobalKernel(body) || NameLooksKernel(defined);
          st.pending_kernel_decorator = false;
        }
        if (c == '+' || c == '-') {
          if (c == '+') ++st.file.added_lines;
          else ++st.file.removed_lines;
          if (!st.enclosing.empty()) {
            AddBounded(&st.file.functions, st.enclosing, l);
            if (st.enclosing_kernel) AddBounded(&st.file.kernels, st.enclosing, l);
          }
          // The hunk header's function contains the change too, unless a
          // definition inside the hunk started after it.
          if (!st.hunk_function.empty()) AddBounded(&st.file.functions, st.hunk_function, l);
          ScanSymbols(body, c == '+', &st, l);
        }
        continue;
      }
    }
    if (absl::StartsWith(line, "diff --git ")) {
      saw_header = true;
      if (auto s = start_file(GitHeaderPath(line.substr(11))); !s.ok()) return s;
      continue;
    }
    if (absl::StartsWith(line, "--- ")) {
      // A plain `diff -u` file starts at its ---/+++ pair.
      const std::string old_path = CleanPath(line.substr(4));
      absl::string_view plus;
      const size_t save = pos;
      if (!next_line(&plus) || !absl::StartsWith(plus, "+++ ")) {
        pos = save;
        continue;
      }
      const std::string new_path = CleanPath(plus.substr(4));
      saw_header = true;
      if (!in_file || st.file.added_lines + st.file.removed_lines > 0 || !st.file.functions.empty()) {
        if (auto s = start_file(new_path == "/dev/null" ? old_path : new_path); !s.ok()) return s;
      }
      if (old_path == "/dev/null") st.file.added = true;
      if (new_path == "/dev/null") {
        st.file.deleted = true;
        st.file.path = old_path;
      } else {
        st.file.path = new_path;
      }
      st.file.old_path = old_path == "/dev/null" ? st.file.path : old_path;
      st.file.renamed = st.file.renamed || (!st.file.added && !st.file.deleted && st.file.old_path != st.file.path);
      continue;
    }
    if (!in_file) continue;
    if (absl::StartsWith(line, "@@")) {
      absl::string_view ctx;
      if (ParseHunkHeader(line, &old_left, &new_left, &ctx)) {
        st.c_family = CFamily(st.file.path);
        st.enclosing = ContextName(ctx, st.c_family);
        st.hunk_function = st.enclosing;
        st.enclosing_kernel = IsGlobalKernel(ctx) || NameLooksKernel(st.enclosing);
        st.pending_kernel_decorator = false;
      }
      continue;
    }
    if (absl::StartsWith(line, "new file mode")) st.file.added = true;
    else if (absl::StartsWith(line, "deleted file mode")) st.file.deleted = true;
    else if (absl::StartsWith(line, "rename from ")) {
      st.file.renamed = true;
      st.file.old_path = CleanPath(line.substr(12), false);  // rename lines carry no a/ b/
    } else if (absl::StartsWith(line, "rename to ")) {
      st.file.renamed = true;
      st.file.path = CleanPath(line.substr(10), false);
    } else if (absl::StartsWith(line, "Binary files ") || absl::StartsWith(line, "GIT binary patch")) {
      st.file.binary = true;
    }
  }
  if (in_file) Finish(&st, &out);
  if (!saw_header && !text.empty()) {
    return absl::InvalidArgumentError("diff: no file header (expected `diff --git` or a ---/+++ pair)");
  }
  return out;
}

}  // namespace triage
}  // namespace mxval
