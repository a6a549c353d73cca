// M-bucketed dispatch tables, as data (one JSON file per arch), in the style
// of AITER's Triton config files:
//
// {
//   "arch": "cpu",
//   "kernel": "a16wfp4",
//   "ops": {
//     "kup": {                                   // operation
//       "N=512,K=192": {                         // shape-specific table ...
//         "M_LEQ_16": {"BLOCK_SIZE_M": 16, ...}, // used when M <= 16
//         "M_LEQ_256": {...},
//         "any": {...}                           // everything larger
//       },
//       "default": {...}                         // ... else this one
//     },
//     "vup": {...}
//   }
// }
// A bucket may name the kernel that runs it ("kernel": "a16wfp4_tc_panel");
// otherwise the table's top-level "kernel" does.
//
// AITER's own files are also accepted as they are: a flat object of
// buckets ({"M_LEQ_16": {...}, ..., "any": {...}}, one file per kernel and
// shape in AITER's tree) applies to every op and shape, and its entries are
// named by the bucket alone ("M_LEQ_16").
//
// A pull request that retunes a table is exactly the "candidate vs baseline"
// a validation job compares; the entry a shape selects is reported by name
// ("kup/N=512,K=192/M_LEQ_16") so triage can tell whether a change touched it.
#ifndef MXVAL_KERNELS_DISPATCH_CONFIG_TABLE_H_
#define MXVAL_KERNELS_DISPATCH_CONFIG_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dispatch/tile_config.h"

namespace mxval {

struct DispatchEntry {
  std::string name;    // "op/shape-key/bucket"
  std::string kernel;  // kernel to run: the bucket's "kernel", else the table's
  TileConfig config;
};

struct ConfigTableOptions {
  // Keep config keys this file does not know (a Python kernel's table: its
  // configs go to the kernel verbatim) instead of refusing them.
  bool allow_unknown_keys = false;
};

class ConfigTable {
 public:
  // Tables nested deeper are refused (a config value is a scalar or a small
  // list; a deep one is an attack on whoever copies or prints it).
  static constexpr int kMaxDepth = 16;

  // INVALID_ARGUMENT (naming the JSON path) for malformed tables: bad bucket
  // names, duplicate thresholds, unknown config keys (unless allowed),
  // neither an ops object nor AITER's flat buckets.
  static absl::StatusOr<ConfigTable> FromJson(const nlohmann::json& j, const ConfigTableOptions& options = {});
  static absl::StatusOr<ConfigTable> FromJsonText(const std::string& text, const ConfigTableOptions& options = {});
  static absl::StatusOr<ConfigTable> Load(const std::string& path, const ConfigTableOptions& options = {});

  // The entry for op at (M, N, K). NOT_FOUND if the op is unknown, neither
  // "N=..,K=.." nor "default" exists, or M exceeds every bucket and no "any".
  // A table of C kernels' configs (not allow_unknown_keys) has NUM_KSPLIT
  // lowered to ceil(K / BLOCK_SIZE_K) where it asks for more splits than K
  // has blocks, as AITER's launcher does with get_splitk: a "default"
  // bucket's split-K then serves every K. A Python kernel's table goes to
  // its kernel as written (such launchers adapt split-K themselves).
  absl::StatusOr<DispatchEntry> Lookup(const std::string& op, int64_t M, int64_t N, int64_t K) const;

  // Every distinct config in the table (for "test every config" sweeps).
  std::vector<DispatchEntry> AllEntries() const;
  const std::string& arch() const { return arch_; }

 private:
  struct Bucket {
    int64_t m_leq;  // INT64_MAX for "any"
    std::string name;
    std::string kernel;
    TileConfig config;
  };
  // Parses one shape's buckets ({"M_LEQ_16": {...}, "any": {...}}).
  static absl::StatusOr<std::vector<Bucket>> ParseBuckets(const nlohmann::json& j, const std::string& where,
                                                          const std::string& kernel, const ConfigTableOptions& o);
  std::string EntryName(const std::string& op, const std::string& key, const Bucket& b) const;
  std::string arch_, kernel_;
  bool flat_ = false;        // AITER's flat file: one set of buckets for every op and shape
  bool fit_ksplit_ = true;   // NUM_KSPLIT lowered at lookup (not allow_unknown_keys)
  // op -> shape key -> buckets sorted by m_leq
  std::map<std::string, std::map<std::string, std::vector<Bucket>>> ops_;
};

}  // namespace mxval

#endif  // MXVAL_KERNELS_DISPATCH_CONFIG_TABLE_H_
