#include "kernels/dispatch/tile_config.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mxval {

std::string TileConfig::ToString() const {
  return absl::StrCat("BM", block_m, "_BN", block_n, "_BK", block_k, "_KS", ksplit, "_S", num_stages, "_W", num_warps);
}

nlohmann::json TileConfig::ToJson() const {
  return {{"BLOCK_SIZE_M", block_m}, {"BLOCK_SIZE_N", block_n}, {"BLOCK_SIZE_K", block_k},
          {"NUM_KSPLIT", ksplit},    {"num_stages", num_stages}, {"num_warps", num_warps}};
}

absl::StatusOr<TileConfig> TileConfigFromJson(const nlohmann::json& j, const std::string& where,
                                              bool allow_unknown_keys) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": config must be a JSON object"));
  TileConfig c;
  struct Field {
    const char* key;
    int* dst;
    bool required;
  } fields[] = {{"BLOCK_SIZE_M", &c.block_m, true}, {"BLOCK_SIZE_N", &c.block_n, true},
                {"BLOCK_SIZE_K", &c.block_k, true}, {"NUM_KSPLIT", &c.ksplit, false},
                {"num_stages", &c.num_stages, false}, {"num_warps", &c.num_warps, false}};
  // "kernel" is read by ConfigTable (which kernel of the library runs the bucket).
  static const char* kIgnored[] = {"GROUP_SIZE_M", "waves_per_eu", "matrix_instr_nonkdim", "cache_modifier", "kpack",
                                   "SPLITK_BLOCK_SIZE", "kernel"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const Field& f : fields) known |= it.key() == f.key;
    for (const char* k : kIgnored) known |= it.key() == k;
    if (!known && !allow_unknown_keys) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown config key '", it.key(), "'"));
    }
  }
  for (const Field& f : fields) {
    if (!j.contains(f.key)) {
      if (f.required) return absl::InvalidArgumentError(absl::StrCat(where, ": missing ", f.key));
      continue;
    }
    const auto& v = j[f.key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", f.key, " must be an integer in [1, 4096]"));
    }
    *f.dst = v.get<int>();
  }
  nlohmann::json verbatim = j;
  verbatim.erase("kernel");
  c.json = verbatim.dump();
  return c;
}

std::string ConfigExtras(const std::string& json, size_t max_bytes) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return "";
  static const char* kSix[] = {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "NUM_KSPLIT", "num_stages", "num_warps"};
  std::string out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool six = false;
    for (const char* k : kSix) six |= it.key() == k;
    if (six) continue;
    absl::StrAppend(&out, out.empty() ? "" : ",", it.key(), "=",
                    it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  }
  if (out.size() > max_bytes) out = absl::StrCat(out.substr(0, max_bytes), "...");
  return out;
}

absl::StatusOr<TileConfig> ParseTileConfig(const std::string& s) {
  TileConfig c;
  bool m = false, n = false, k = false;
  for (absl::string_view part : absl::StrSplit(s, '_')) {
    auto take = [&](absl::string_view prefix, int* dst) -> int {
      if (!absl::StartsWith(part, prefix)) return 0;
      int v;
      if (!absl::SimpleAtoi(part.substr(prefix.size()), &v) || v < 1 || v > 4096) return -1;
      *dst = v;
      return 1;
    };
    int r = 0;
    if ((r = take("BM", &c.block_m)) != 0) m = true;
    else if ((r = take("BN", &c.block_n)) != 0) n = true;
    else if ((r = take("BK", &c.block_k)) != 0) k = true;
    else if ((r = take("KS", &c.ksplit)) != 0) {}
    else if ((r = take("S", &c.num_stages)) != 0) {}
    else if ((r = take("W", &c.num_warps)) != 0) {}
    if (r != 1) return absl::InvalidArgumentError(absl::StrCat("config '", s, "': bad part '", part, "'"));
  }
  if (!m || !n || !k) return absl::InvalidArgumentError(absl::StrCat("config '", s, "' needs BM, BN and BK"));
  return c;
}

}  // namespace mxval
