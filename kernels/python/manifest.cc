#include "kernels/python/manifest.h"

#include "kernels/dispatch/tile_config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <initializer_list>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace mxval::python {
namespace {

using nlohmann::json;

constexpr size_t kMaxNameBytes = 64;
constexpr size_t kMaxBuildIdBytes = 128;
constexpr size_t kMaxEntryPointBytes = 256;
constexpr size_t kMaxRelativePathBytes = 1024;  // TreeLimits::max_path_bytes
constexpr size_t kMaxArchBytes = 32;
constexpr size_t kMaxKernels = 64;
constexpr size_t kMaxListLength = 64;  // archs, python_paths
constexpr size_t kMaxConfigs = 4096;
constexpr size_t kMaxDepth = 32;  // JSON nesting; bounds every later recursion over the document
constexpr absl::string_view kBuiltinPrefix = "mxval-builtin-";

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(kManifestFile, ": ", field, ": ", why));
}

// A value as an error message shows it: strings quoted, escaped and cut short.
std::string Shown(const json& v) {
  if (!v.is_string()) return v.type_name();
  const std::string& s = v.get_ref<const std::string&>();
  constexpr size_t kMax = 80;
  const std::string escaped = absl::CHexEscape(absl::string_view(s).substr(0, kMax));
  return absl::StrCat("'", escaped, s.size() > kMax ? "'..." : "'");
}

std::string Sub(absl::string_view parent, absl::string_view key) {
  return parent.empty() ? std::string(key) : absl::StrCat(parent, ".", key);
}
std::string At(absl::string_view parent, size_t i) { return absl::StrCat(parent, "[", i, "]"); }

// Walks the document before it is built, for what the DOM cannot tell:
// repeated keys (the DOM keeps the last silently) and the position of a
// syntax error. It also bounds the nesting depth.
class SaxCheck : public nlohmann::json_sax<json> {
 public:
  absl::Status status() const { return status_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Value() && Push(/*object=*/true); }
  bool end_object() override { return Pop(); }
  bool start_array(std::size_t) override { return Value() && Push(/*object=*/false); }
  bool end_array() override { return Pop(); }

  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    if (!f.keys.insert(k).second) {
      status_ = Bad(Path(), "the key appears twice");
      return false;
    }
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    // what() is "[json.exception.parse_error.101] parse error at line L, column C: ...".
    absl::string_view what = ex.what();
    const size_t bracket = what.find("] ");
    if (bracket != absl::string_view::npos) what.remove_prefix(bracket + 2);
    status_ = absl::InvalidArgumentError(absl::StrCat(kManifestFile, ": not valid JSON: ", what));
    return false;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;   // the current key of an object
    size_t index = 0;  // the number of elements of an array so far
  };

  bool Value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  bool Push(bool object) {
    if (frames_.size() >= kMaxDepth) {
      status_ = Bad(Path(), absl::StrCat("nested deeper than ", kMaxDepth, " levels"));
      return false;
    }
    frames_.push_back({object, {}, {}, 0});
    return true;
  }
  bool Pop() {
    frames_.pop_back();
    return true;
  }
  std::string Path() const {
    std::string p;
    for (const Frame& f : frames_) p = f.object ? Sub(p, f.key) : At(p, f.index - 1);
    return p.empty() ? "(top level)" : p;
  }

  std::vector<Frame> frames_;
  absl::Status status_;
};

// Fails on a key of `obj` not in `allowed`: a misspelled optional field must
// not be ignored.
absl::Status CheckKeys(const json& obj, absl::string_view path, std::initializer_list<absl::string_view> allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (absl::string_view a : allowed) known = known || it.key() == a;
    if (!known) {
      return Bad(Sub(path, absl::CHexEscape(it.key())),
                 absl::StrCat("unknown key (known: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

const json* Find(const json& obj, absl::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

absl::StatusOr<std::string> GetString(const json& v, absl::string_view field) {
  if (!v.is_string()) return Bad(field, absl::StrCat("must be a string, not ", Shown(v)));
  return v.get<std::string>();
}

absl::StatusOr<std::string> RequiredString(const json& obj, absl::string_view path, absl::string_view key) {
  const json* v = Find(obj, key);
  if (v == nullptr) return Bad(Sub(path, key), "missing");
  return GetString(*v, Sub(path, key));
}

// A non-empty array of at most `max` elements.
absl::Status CheckArray(const json& v, absl::string_view field, size_t max) {
  if (!v.is_array()) return Bad(field, absl::StrCat("must be an array, not ", Shown(v)));
  if (v.empty()) return Bad(field, "must not be empty");
  if (v.size() > max) return Bad(field, absl::StrCat("has ", v.size(), " elements, more than ", max));
  return absl::OkStatus();
}

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-'; }

absl::Status CheckName(const std::string& s, absl::string_view field) {
  if (s.empty() || s.size() > kMaxNameBytes) {
    return Bad(field, absl::StrCat("must be 1..", kMaxNameBytes, " bytes, not ", s.size()));
  }
  for (char c : s) {
    if (!IsNameChar(c)) return Bad(field, absl::StrCat(Shown(s), " has a character outside [A-Za-z0-9_.-]"));
  }
  if (s[0] == '.') return Bad(field, absl::StrCat(Shown(s), " must not start with '.'"));
  return absl::OkStatus();
}

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || absl::ascii_isdigit(s[0])) return false;
  for (char c : s)
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  return true;
}

bool IsDottedIdentifier(absl::string_view s) {
  for (absl::string_view part : absl::StrSplit(s, '.'))
    if (!IsIdentifier(part)) return false;
  return true;
}

absl::Status CheckEntryPoint(const std::string& s, absl::string_view field) {
  const std::vector<absl::string_view> sides = absl::StrSplit(s, ':');
  if (s.size() > kMaxEntryPointBytes || sides.size() != 2 || !IsDottedIdentifier(sides[0]) ||
      !IsDottedIdentifier(sides[1])) {
    return Bad(field, absl::StrCat("must be 'package.module:function' (dotted Python identifiers, one ':', at most ",
                                   kMaxEntryPointBytes, " bytes), not ", Shown(s)));
  }
  return absl::OkStatus();
}

// A path inside the library's tree; `file` if it must name a file.
absl::Status CheckRelativePath(const std::string& s, absl::string_view field, bool file) {
  if (s.empty() || s.size() > kMaxRelativePathBytes) {
    return Bad(field, absl::StrCat("must be 1..", kMaxRelativePathBytes, " bytes, not ", s.size()));
  }
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Bad(field, absl::StrCat(Shown(s), " has a control character"));
    }
  }
  if (s[0] == '/') return Bad(field, absl::StrCat(Shown(s), " must be relative to the library's root, not absolute"));
  const std::vector<absl::string_view> parts = absl::StrSplit(s, '/');
  for (absl::string_view part : parts) {
    if (part == "..") return Bad(field, absl::StrCat(Shown(s), " must not have a '..' component"));
  }
  if (file && (parts.back().empty() || parts.back() == ".")) {
    return Bad(field, absl::StrCat(Shown(s), " must name a file"));
  }
  return absl::OkStatus();
}

// The elements of a non-empty array of unique strings, each passing `check`.
template <typename Check>
absl::StatusOr<std::vector<std::string>> StringList(const json& obj, absl::string_view path, absl::string_view key,
                                                    size_t max, Check check) {
  const std::string field = Sub(path, key);
  const json* v = Find(obj, key);
  if (v == nullptr) return Bad(field, "missing");
  MXVAL_RETURN_IF_ERROR(CheckArray(*v, field, max));
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    MXVAL_ASSIGN_OR_RETURN(std::string s, GetString((*v)[i], At(field, i)));
    MXVAL_RETURN_IF_ERROR(check(s, At(field, i)));
    for (const std::string& o : out) {
      if (o == s) return Bad(At(field, i), absl::StrCat(Shown(s), " is listed twice"));
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::Status CheckArch(const std::string& s, absl::string_view field) {
  bool ok = !s.empty() && s.size() <= kMaxArchBytes;
  for (char c : s) ok = ok && (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_');
  if (!ok) return Bad(field, absl::StrCat("must be 1..", kMaxArchBytes, " bytes of [a-z0-9_], not ", Shown(s)));
  return absl::OkStatus();
}

absl::Status CheckActivation(const std::string& s, absl::string_view field) {
  if (s != "bf16" && s != "mxfp4-even")
    return Bad(field, absl::StrCat("must be 'bf16' or 'mxfp4-even', not ", Shown(s)));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<json>> Configs(const json& v, absl::string_view field) {
  MXVAL_RETURN_IF_ERROR(CheckArray(v, field, kMaxConfigs));
  std::vector<json> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& c = v[i];
    if (!c.is_object()) return Bad(At(field, i), absl::StrCat("must be an object, not ", Shown(c)));
    for (const char* key : {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"}) {
      const json* b = Find(c, key);
      // Non-negative integer literals parse as unsigned.
      if (b == nullptr || !b->is_number_unsigned() || b->get<uint64_t>() == 0) {
        return Bad(Sub(At(field, i), key), b == nullptr ? "missing" : "must be a positive integer");
      }
    }
    // Then as a job's table entry is checked (tile_config.h): the planner
    // must be able to plan with every config a registered library declares.
    if (auto t = TileConfigFromJson(c, At(field, i), /*allow_unknown_keys=*/true); !t.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kManifestFile, ": ", t.status().message()));
    }
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<KernelEntry> ParseKernel(const json& k, const std::string& path) {
  if (!k.is_object()) return Bad(path, absl::StrCat("must be an object, not ", Shown(k)));
  MXVAL_RETURN_IF_ERROR(CheckKeys(
      k, path,
      {"name", "entry", "can_implement", "workspace_size", "archs", "activations", "configs", "config_table"}));
  KernelEntry e;
  MXVAL_ASSIGN_OR_RETURN(e.name, RequiredString(k, path, "name"));
  MXVAL_RETURN_IF_ERROR(CheckName(e.name, Sub(path, "name")));
  MXVAL_ASSIGN_OR_RETURN(e.entry, RequiredString(k, path, "entry"));
  MXVAL_RETURN_IF_ERROR(CheckEntryPoint(e.entry, Sub(path, "entry")));
  for (auto [key, out] :
       {std::pair{"can_implement", &e.can_implement}, std::pair{"workspace_size", &e.workspace_size}}) {
    const json* v = Find(k, key);
    if (v == nullptr) continue;
    MXVAL_ASSIGN_OR_RETURN(*out, GetString(*v, Sub(path, key)));
    MXVAL_RETURN_IF_ERROR(CheckEntryPoint(*out, Sub(path, key)));
  }
  MXVAL_ASSIGN_OR_RETURN(e.archs, StringList(k, path, "archs", kMaxListLength, CheckArch));
  MXVAL_ASSIGN_OR_RETURN(e.activations, StringList(k, path, "activations", 2, CheckActivation));
  const json* configs = Find(k, "configs");
  const json* table = Find(k, "config_table");
  if ((configs == nullptr) == (table == nullptr)) {
    return Bad(Sub(path, configs ? "configs" : "config_table"),
               configs ? "give exactly one of configs and config_table, not both"
                       : "missing (give exactly one of configs and config_table)");
  }
  if (configs != nullptr) {
    MXVAL_ASSIGN_OR_RETURN(e.configs, Configs(*configs, Sub(path, "configs")));
  } else {
    MXVAL_ASSIGN_OR_RETURN(e.config_table, GetString(*table, Sub(path, "config_table")));
    MXVAL_RETURN_IF_ERROR(CheckRelativePath(e.config_table, Sub(path, "config_table"), /*file=*/true));
  }
  return e;
}

absl::StatusOr<Manifest> FromJson(const json& j) {
  if (!j.is_object()) return Bad("(top level)", absl::StrCat("must be an object, not ", Shown(j)));
  // The format first: another version's keys are not typos.
  MXVAL_ASSIGN_OR_RETURN(const std::string format, RequiredString(j, "", "format"));
  if (format != kManifestFormat) {
    return Bad("format", absl::StrCat("must be '", kManifestFormat, "', not ", Shown(format)));
  }
  MXVAL_RETURN_IF_ERROR(CheckKeys(j, "", {"format", "name", "build_id", "python_paths", "kernels"}));

  Manifest m;
  MXVAL_ASSIGN_OR_RETURN(m.name, RequiredString(j, "", "name"));
  MXVAL_RETURN_IF_ERROR(CheckName(m.name, "name"));
  // Built-in libraries are registered by mxval itself; a look-alike name
  // (in any case) would pass for one in results and triage.
  if (absl::StartsWithIgnoreCase(m.name, kBuiltinPrefix)) {
    return Bad("name",
               absl::StrCat(Shown(m.name), " is reserved: '", kBuiltinPrefix, "*' names mxval's own libraries"));
  }

  MXVAL_ASSIGN_OR_RETURN(m.build_id, RequiredString(j, "", "build_id"));
  if (m.build_id.empty() || m.build_id.size() > kMaxBuildIdBytes) {
    return Bad("build_id", absl::StrCat("must be 1..", kMaxBuildIdBytes, " bytes, not ", m.build_id.size()));
  }
  for (char c : m.build_id) {
    if (c < 0x21 || c > 0x7e) {
      return Bad("build_id", absl::StrCat(Shown(m.build_id), " has a byte outside printable ASCII 0x21..0x7e"));
    }
  }

  if (Find(j, "python_paths") == nullptr) {
    m.python_paths = {"."};
  } else {
    MXVAL_ASSIGN_OR_RETURN(m.python_paths, StringList(j, "", "python_paths", kMaxListLength,
                                                      [](const std::string& s, absl::string_view f) {
                                                        return CheckRelativePath(s, f, /*file=*/false);
                                                      }));
  }

  const json* kernels = Find(j, "kernels");
  if (kernels == nullptr) return Bad("kernels", "missing");
  MXVAL_RETURN_IF_ERROR(CheckArray(*kernels, "kernels", kMaxKernels));
  for (size_t i = 0; i < kernels->size(); ++i) {
    const std::string path = At("kernels", i);
    MXVAL_ASSIGN_OR_RETURN(KernelEntry e, ParseKernel((*kernels)[i], path));
    for (size_t o = 0; o < m.kernels.size(); ++o) {
      if (m.kernels[o].name == e.name) {
        return Bad(Sub(path, "name"), absl::StrCat(Shown(e.name), " is also the name of kernels[", o, "]"));
      }
    }
    m.kernels.push_back(std::move(e));
  }
  return m;
}

}  // namespace

absl::StatusOr<Manifest> ParseManifest(const std::string& json_text) {
  if (json_text.size() > kMaxManifestBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(kManifestFile, ": ", json_text.size(), " bytes, more than ", kMaxManifestBytes));
  }
  SaxCheck check;
  if (!json::sax_parse(json_text, &check)) {
    return check.status().ok() ? absl::InvalidArgumentError(absl::StrCat(kManifestFile, ": not valid JSON"))
                               : check.status();
  }
  const json j = json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(kManifestFile, ": not valid JSON"));
  return FromJson(j);
}

absl::StatusOr<Manifest> LoadManifest(const std::string& library_dir) {
  const std::string path = absl::StrCat(library_dir, "/", kManifestFile);
  // O_NOFOLLOW: the manifest is part of the tree, where symlinks are refused.
  // O_NONBLOCK: a FIFO must not block the open; the fstat below refuses it.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": ", strerror(err)));
    if (err == ELOOP) return absl::InvalidArgumentError(absl::StrCat(path, ": is a symlink"));
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", strerror(err)));
  }
  std::string text;
  absl::Status st = [&]() -> absl::Status {
    struct stat s;
    if (fstat(fd, &s) != 0) return absl::UnavailableError(absl::StrCat(path, ": cannot stat: ", strerror(errno)));
    if (!S_ISREG(s.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    // Read one byte past the limit: a file that grows after fstat is still caught.
    char buf[1 << 16];
    while (text.size() <= kMaxManifestBytes) {
      const ssize_t got = read(fd, buf, sizeof buf);
      if (got < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(absl::StrCat(path, ": cannot read: ", strerror(errno)));
      }
      if (got == 0) break;
      text.append(buf, static_cast<size_t>(got));
    }
    if (text.size() > kMaxManifestBytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": more than ", kMaxManifestBytes, " bytes"));
    }
    return absl::OkStatus();
  }();
  close(fd);
  MXVAL_RETURN_IF_ERROR(st);
  absl::StatusOr<Manifest> m = ParseManifest(text);
  // ParseManifest's messages begin with the file's name: give its directory too.
  if (!m.ok()) return absl::Status(m.status().code(), absl::StrCat(library_dir, "/", m.status().message()));
  return m;
}

}  // namespace mxval::python
