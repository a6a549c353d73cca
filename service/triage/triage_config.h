// Loading triage configuration: the ordered log rule file and the ownership
// map, as YAML or JSON (the proto3 JSON mapping of v1.LogRules /
// v1.OwnershipMap; unknown fields are errors). Built-in defaults
// (rules/default_rules.yaml, rules/default_ownership.yaml) are embedded.
#ifndef MXVAL_SERVICE_TRIAGE_TRIAGE_CONFIG_H_
#define MXVAL_SERVICE_TRIAGE_TRIAGE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace triage {

inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

// INVALID_ARGUMENT naming `what` (a path or "built-in rules") for malformed
// text, unknown fields or wrong types.
absl::StatusOr<v1::LogRules> ParseLogRules(const std::string& text, bool yaml, const std::string& what);
absl::StatusOr<v1::OwnershipMap> ParseOwnership(const std::string& text, bool yaml, const std::string& what);
// .yaml/.yml as YAML, .json as JSON, else by the text (IsYamlConfig); a
// regular file or a pipe. NOT_FOUND if it
// cannot be opened; INVALID_ARGUMENT for a device or directory, over
// kMaxConfigFileBytes, or past the YAML bounds (common/yaml_json.h).
absl::StatusOr<v1::LogRules> LoadLogRules(const std::string& path);
absl::StatusOr<v1::OwnershipMap> LoadOwnership(const std::string& path);

const v1::LogRules& DefaultLogRules();
const v1::OwnershipMap& DefaultOwnership();

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_TRIAGE_CONFIG_H_
