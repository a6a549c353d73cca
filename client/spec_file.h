// Job spec files for the CLI: JSON (proto3 JSON mapping) or YAML (the same
// structure). Unknown fields, bad types and malformed files are
// INVALID_ARGUMENT naming the file and, for YAML, the line and column.
#ifndef MXVAL_CLIENT_SPEC_FILE_H_
#define MXVAL_CLIENT_SPEC_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/yaml_json.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {

inline constexpr size_t kMaxSpecFileBytes = 4 << 20;

// Parses spec text; `yaml` selects the syntax.
absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, bool yaml);

// Loads a spec file (a regular file or a pipe, at most kMaxSpecFileBytes):
// .yaml/.yml as YAML, .json as JSON, anything else (a pipe) by its text
// (IsYamlConfig). NOT_FOUND if it cannot be
// opened; INVALID_ARGUMENT naming the file for anything else.
absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path);

}  // namespace mxval

#endif  // MXVAL_CLIENT_SPEC_FILE_H_
