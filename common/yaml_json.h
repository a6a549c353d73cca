// YAML -> JSON for config files (job specs, triage rules, ownership maps),
// so one JSON schema (a proto message) covers both syntaxes.
#ifndef MXVAL_COMMON_YAML_JSON_H_
#define MXVAL_COMMON_YAML_JSON_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mxval {

// Bounds on what one YAML text may make the converter do.
inline constexpr size_t kMaxYamlBytes = 4 << 20;
// Nesting of sequences and mappings.
inline constexpr int kMaxYamlDepth = 64;
// Nodes produced by expanding aliases (*name), over the whole document: a
// "billion laughs" document is refused once its expansion passes this.
inline constexpr int64_t kMaxYamlAliasNodes = 100000;

// YAML text -> JSON text of its first document (mappings, sequences,
// scalars; plain scalars that look like numbers, booleans or null are typed,
// quoted ones stay strings; aliases are expanded). INVALID_ARGUMENT with the
// line (and column, for syntax errors) for malformed YAML, and for a text
// over kMaxYamlBytes, nesting over kMaxYamlDepth or alias expansion over
// kMaxYamlAliasNodes. The cost is linear in the text: the converter reads
// events one at a time and stops at the first bound it passes.
absl::StatusOr<std::string> YamlToJson(const std::string& yaml);

// Whether a config file is YAML: by its name (.yaml/.yml: yes, .json: no),
// else (a pipe such as /dev/fd/63 has no extension) by its text: JSON if its
// first non-blank character is '{', YAML otherwise.
bool IsYamlConfig(const std::string& path, const std::string& text);

}  // namespace mxval

#endif  // MXVAL_COMMON_YAML_JSON_H_
