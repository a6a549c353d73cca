// YAML -> JSON for config files (job specs, triage rules, ownership maps),
// so one JSON schema (a proto message) covers both syntaxes.
#ifndef MXVAL_COMMON_YAML_JSON_H_
#define MXVAL_COMMON_YAML_JSON_H_

#include <string>

#include "absl/status/statusor.h"

namespace mxval {

// YAML text -> JSON text (mappings, sequences, scalars; plain scalars that
// look like numbers, booleans or null are typed, quoted ones stay strings).
// INVALID_ARGUMENT with line and column for malformed YAML; depth and size
// are bounded.
absl::StatusOr<std::string> YamlToJson(const std::string& yaml);

}  // namespace mxval

#endif  // MXVAL_COMMON_YAML_JSON_H_
