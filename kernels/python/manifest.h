// The manifest of a Python kernel library, `mxval_library.json` at the root of
// its tree (kernels/python/README.md defines the format and every field).
// Parsing is strict: an unknown or repeated key is an error, so a typo in a
// field name cannot silently drop a setting.
#ifndef MXVAL_KERNELS_PYTHON_MANIFEST_H_
#define MXVAL_KERNELS_PYTHON_MANIFEST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mxval::python {

inline constexpr char kManifestFile[] = "mxval_library.json";
inline constexpr char kManifestFormat[] = "mxval-python-library-v1";
inline constexpr size_t kMaxManifestBytes = size_t{1} << 20;

struct KernelEntry {
  std::string name;  // unique in the library; [A-Za-z0-9_.-], 1..64 bytes, no leading '.'
  // Entry points "package.module:function": dotted Python identifiers on
  // each side of one ':' (ASCII, at most 256 bytes).
  std::string entry;
  std::string can_implement;             // or empty
  std::string workspace_size;            // or empty
  std::vector<std::string> archs;        // non-empty, unique, each [a-z0-9_]{1,32}
  std::vector<std::string> activations;  // non-empty, unique, each "bf16" or "mxfp4-even"
  // Exactly one of the two is set.
  // 1..4096 objects, as written (every key kept); each has positive integers
  // BLOCK_SIZE_M, BLOCK_SIZE_N and BLOCK_SIZE_K.
  std::vector<nlohmann::json> configs;
  std::string config_table;  // a file's tree-relative path, or empty
};

struct Manifest {
  std::string name;      // as a kernel's name, and not "mxval-builtin-*" (any case)
  std::string build_id;  // 1..128 bytes of 0x21..0x7e
  // Tree-relative directories put first on sys.path; ["."] if the manifest has
  // none. Relative paths (here and config_table) are 1..1024 bytes, not
  // absolute, with no ".." component and no control characters.
  std::vector<std::string> python_paths;
  std::vector<KernelEntry> kernels;  // 1..64, in manifest order
};

// Parses and validates a manifest's text.
// INVALID_ARGUMENT naming the field ("mxval_library.json: kernels[1].entry: ...")
// if the text is not JSON, is larger than kMaxManifestBytes, has a missing,
// mistyped, unknown or repeated field, or breaks a rule above.
absl::StatusOr<Manifest> ParseManifest(const std::string& json_text);

// Reads and parses `<library_dir>/mxval_library.json`.
// NOT_FOUND if there is no such file; INVALID_ARGUMENT if it is not a regular
// file, is larger than kMaxManifestBytes, or does not parse (ParseManifest);
// UNAVAILABLE if reading it fails.
absl::StatusOr<Manifest> LoadManifest(const std::string& library_dir);

}  // namespace mxval::python

#endif  // MXVAL_KERNELS_PYTHON_MANIFEST_H_
