#include "client/flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mxval {

void FlagSet::String(const std::string& name, std::string* dst, const std::string& help, bool required) {
  flags_.push_back({name, help, Kind::kString, dst, required, false, *dst});
}
void FlagSet::Int(const std::string& name, int64_t* dst, const std::string& help) {
  flags_.push_back({name, help, Kind::kInt, dst, false, false, absl::StrCat(*dst)});
}
void FlagSet::Double(const std::string& name, double* dst, const std::string& help) {
  flags_.push_back({name, help, Kind::kDouble, dst, false, false, absl::StrCat(*dst)});
}
void FlagSet::Bool(const std::string& name, bool* dst, const std::string& help) {
  flags_.push_back({name, help, Kind::kBool, dst, false, false, ""});
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

bool FlagSet::WasSet(const std::string& name) const {
  for (const Flag& f : flags_)
    if (f.name == name) return f.set;
  return false;
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      return absl::OkStatus();
    }
    if (a.size() < 3 || a.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a, "' (flags start with --)"));
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* f = Find(name);
    if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (f->kind == Kind::kBool) {
      if (has_value && value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", value, "' is not true or false"));
      }
      *static_cast<bool*>(f->dst) = !has_value || value == "true";
      f->set = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = args[++i];
    }
    switch (f->kind) {
      case Kind::kString:
        if (value.empty()) return absl::InvalidArgumentError(absl::StrCat("--", name, " must not be empty"));
        *static_cast<std::string*>(f->dst) = value;
        break;
      case Kind::kInt:
        if (!absl::SimpleAtoi(value, static_cast<int64_t*>(f->dst))) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", value, "' is not an integer"));
        }
        break;
      case Kind::kDouble:
        if (!absl::SimpleAtod(value, static_cast<double*>(f->dst))) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", value, "' is not a number"));
        }
        break;
      case Kind::kBool: break;
    }
    f->set = true;
  }
  for (const Flag& f : flags_) {
    if (f.required && !f.set) return absl::InvalidArgumentError(absl::StrCat("missing required flag --", f.name));
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("usage: mxval ", verb_, " [flags]\n\n", summary_, "\n\nflags:\n");
  for (const Flag& f : flags_) {
    std::string lhs = absl::StrCat("  --", f.name);
    if (f.kind != Kind::kBool) absl::StrAppend(&lhs, " ", f.kind == Kind::kString ? "STR" : "N");
    std::string rhs = f.help;
    if (f.required) absl::StrAppend(&rhs, " (required)");
    else if (!f.default_text.empty()) absl::StrAppend(&rhs, " (default ", f.default_text, ")");
    absl::StrAppend(&out, absl::StrFormat("%-28s %s\n", lhs, rhs));
  }
  return out;
}

}  // namespace mxval
