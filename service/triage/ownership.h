// The ownership map: which CI jobs (or test files) and which kernels can be
// affected by which source paths. Globs: `*` any run of characters except
// '/', `**` any run including '/', `?` one character except '/'; a glob
// with no '/' also matches a path's last component ("*.cu").
#ifndef MXVAL_SERVICE_TRIAGE_OWNERSHIP_H_
#define MXVAL_SERVICE_TRIAGE_OWNERSHIP_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mxval/v1/mxval.pb.h"
#include "re2/re2.h"

namespace mxval {
namespace triage {

// INVALID_ARGUMENT for an empty or oversized glob.
absl::StatusOr<std::unique_ptr<RE2>> CompileGlob(const std::string& glob);
bool GlobMatch(const RE2& glob, bool basename_too, const std::string& path);

struct Reach {
  v1::Reachability reachability = v1::REACHABILITY_UNKNOWN;
  std::vector<std::string> files;  // changed files that reach the job
};

class Ownership {
 public:
  // INVALID_ARGUMENT naming entries[i].paths[j] (or jobs/kernels) on a bad glob.
  static absl::StatusOr<std::unique_ptr<Ownership>> Create(const v1::OwnershipMap& map);
  // An empty map: every job's reachability is UNKNOWN.
  static std::unique_ptr<Ownership> Empty();

  Reach JobReach(const std::string& job, const std::vector<std::string>& changed_files) const;
  // Changed files that map to `kernel` (entries whose kernels list it).
  std::vector<std::string> FilesForKernel(const std::string& kernel, const std::vector<std::string>& changed_files) const;

 private:
  struct Glob {
    std::unique_ptr<RE2> re;
    bool basename_too = false;
  };
  struct Entry {
    std::vector<Glob> paths, jobs;
    std::set<std::string> kernels;
  };
  static bool AnyMatch(const std::vector<Glob>& globs, const std::string& s);
  std::vector<Entry> entries_;
};

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_OWNERSHIP_H_
