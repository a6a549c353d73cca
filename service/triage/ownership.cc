#include "service/triage/ownership.h"

#include "absl/strings/str_cat.h"

namespace mxval {
namespace triage {

absl::StatusOr<std::unique_ptr<RE2>> CompileGlob(const std::string& glob) {
  if (glob.empty()) return absl::InvalidArgumentError("empty glob");
  if (glob.size() > 1024) return absl::InvalidArgumentError("glob longer than 1024 bytes");
  std::string re = "^";
  for (size_t i = 0; i < glob.size(); ++i) {
    const char c = glob[i];
    if (glob.compare(i, 3, "**/") == 0) {  // any directories, including none
      re += "(?:.*/)?";
      i += 2;
    } else if (glob.compare(i, 2, "**") == 0) {
      re += ".*";
      ++i;
    } else if (c == '*') {
      re += "[^/]*";
    } else if (c == '?') {
      re += "[^/]";
    } else {
      re += RE2::QuoteMeta(std::string(1, c));
    }
  }
  re += "$";
  RE2::Options o;
  o.set_log_errors(false);
  auto r = std::make_unique<RE2>(re, o);
  if (!r->ok()) return absl::InvalidArgumentError(absl::StrCat("glob '", glob, "': ", r->error()));
  return r;
}

bool GlobMatch(const RE2& glob, bool basename_too, const std::string& path) {
  if (RE2::FullMatch(path, glob)) return true;
  if (!basename_too) return false;
  const size_t slash = path.rfind('/');
  return slash != std::string::npos && RE2::FullMatch(path.substr(slash + 1), glob);
}

bool Ownership::AnyMatch(const std::vector<Glob>& globs, const std::string& s) {
  for (const Glob& g : globs)
    if (GlobMatch(*g.re, g.basename_too, s)) return true;
  return false;
}

absl::StatusOr<std::unique_ptr<Ownership>> Ownership::Create(const v1::OwnershipMap& map) {
  std::unique_ptr<Ownership> o(new Ownership());
  for (int i = 0; i < map.entries_size(); ++i) {
    const v1::OwnershipEntry& e = map.entries(i);
    Entry out;
    auto add = [&](const google::protobuf::RepeatedPtrField<std::string>& globs, const char* field,
                   std::vector<Glob>* dst) -> absl::Status {
      for (int j = 0; j < globs.size(); ++j) {
        auto re = CompileGlob(globs[j]);
        if (!re.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("entries[", i, "].", field, "[", j, "]: ", re.status().message()));
        }
        dst->push_back({std::move(*re), globs[j].find('/') == std::string::npos});
      }
      return absl::OkStatus();
    };
    if (auto s = add(e.paths(), "paths", &out.paths); !s.ok()) return s;
    if (auto s = add(e.jobs(), "jobs", &out.jobs); !s.ok()) return s;
    if (e.paths_size() == 0) return absl::InvalidArgumentError(absl::StrCat("entries[", i, "].paths: empty"));
    out.kernels.insert(e.kernels().begin(), e.kernels().end());
    o->entries_.push_back(std::move(out));
  }
  return o;
}

std::unique_ptr<Ownership> Ownership::Empty() { return std::unique_ptr<Ownership>(new Ownership()); }

Reach Ownership::JobReach(const std::string& job, const std::vector<std::string>& changed) const {
  Reach r;
  bool covered = false;
  std::set<std::string> files;
  for (const Entry& e : entries_) {
    if (!AnyMatch(e.jobs, job)) continue;
    covered = true;
    for (const std::string& f : changed)
      if (AnyMatch(e.paths, f)) files.insert(f);
  }
  r.files.assign(files.begin(), files.end());
  r.reachability = !covered ? v1::REACHABILITY_UNKNOWN
                   : files.empty() ? v1::REACHABILITY_UNREACHABLE
                                   : v1::REACHABILITY_REACHES;
  return r;
}

std::vector<std::string> Ownership::FilesForKernel(const std::string& kernel, const std::vector<std::string>& changed) const {
  std::set<std::string> files;
  for (const Entry& e : entries_) {
    if (!e.kernels.count(kernel) && !e.kernels.count("*")) continue;
    for (const std::string& f : changed)
      if (AnyMatch(e.paths, f)) files.insert(f);
  }
  return {files.begin(), files.end()};
}

}  // namespace triage
}  // namespace mxval
