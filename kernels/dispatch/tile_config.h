// A kernel tile configuration, named as in AITER's Triton config files.
#ifndef MXVAL_KERNELS_DISPATCH_TILE_CONFIG_H_
#define MXVAL_KERNELS_DISPATCH_TILE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mxval {

struct TileConfig {
  int block_m = 32;    // BLOCK_SIZE_M: rows of x per tile
  int block_n = 64;    // BLOCK_SIZE_N: columns of w per tile
  int block_k = 128;   // BLOCK_SIZE_K: K per step (multiple of 32)
  int ksplit = 1;      // NUM_KSPLIT: K split across tiles, then reduced
  int num_stages = 2;  // pipeline depth (GPU); ignored on CPU
  int num_warps = 4;   // warps per block (GPU); ignored on CPU
  // The config object as the table wrote it (JSON text, every key), given to
  // the kernel verbatim (kernel_api.h, config_json); empty for a config
  // that came from its six fields alone (a compact string, a job override).
  std::string json{};

  // "BM32_BN64_BK128_KS1_S2_W4"
  std::string ToString() const;
  nlohmann::json ToJson() const;
  bool operator==(const TileConfig& o) const {
    return block_m == o.block_m && block_n == o.block_n && block_k == o.block_k && ksplit == o.ksplit &&
           num_stages == o.num_stages && num_warps == o.num_warps && json == o.json;
  }
};

// Reads BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K (required), NUM_KSPLIT,
// num_stages, num_warps (optional). AITER tuning keys that do not apply here
// (GROUP_SIZE_M, waves_per_eu, matrix_instr_nonkdim, cache_modifier, kpack,
// SPLITK_BLOCK_SIZE) are accepted and ignored; any other key is an
// INVALID_ARGUMENT naming it (typos must not silently fall back to defaults).
// `where` prefixes error messages (e.g. "kup/default/M_LEQ_16"). With
// `allow_unknown_keys` (a table for a Python kernel library, whose configs
// carry the library's own keys to the kernel verbatim) other keys are kept
// in `json` instead of refused. The result's `json` is the object without
// "kernel", serialized with sorted keys.
absl::StatusOr<TileConfig> TileConfigFromJson(const nlohmann::json& j, const std::string& where,
                                              bool allow_unknown_keys = false);

// The keys of a config object beyond the six TileConfig fields, as
// "k=v,k=v" in key order ("GROUP_SIZE_M=8,waves_per_eu=2"); empty when there
// are none or `json` is not an object. Bounded to `max_bytes`.
std::string ConfigExtras(const std::string& json, size_t max_bytes = 200);

// Parses the compact form "BM32_BN64_BK128_KS1[_S2][_W4]" (any order).
absl::StatusOr<TileConfig> ParseTileConfig(const std::string& s);

}  // namespace mxval

#endif  // MXVAL_KERNELS_DISPATCH_TILE_CONFIG_H_
