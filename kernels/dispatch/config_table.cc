#include "kernels/dispatch/config_table.h"

#include <algorithm>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor_io.h"

namespace mxval {

absl::StatusOr<std::vector<ConfigTable::Bucket>> ConfigTable::ParseBuckets(const nlohmann::json& j,
                                                                         const std::string& where,
                                                                         const std::string& kernel,
                                                                         const ConfigTableOptions& o) {
  if (!j.is_object() || j.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("config table: ", where, " must be a non-empty object of buckets"));
  }
  std::vector<Bucket> buckets;
  for (auto b = j.begin(); b != j.end(); ++b) {
    Bucket bk;
    bk.name = b.key();
    const std::string at = where.empty() ? b.key() : absl::StrCat(where, "/", b.key());
    if (b.key() == "any") {
      bk.m_leq = std::numeric_limits<int64_t>::max();
    } else if (!absl::StartsWith(b.key(), "M_LEQ_") || !absl::SimpleAtoi(b.key().substr(6), &bk.m_leq) ||
               bk.m_leq < 1) {
      return absl::InvalidArgumentError(absl::StrCat("config table: ", where.empty() ? "" : absl::StrCat(where, ": "),
                                                     "bucket '", b.key(), "' is not 'M_LEQ_<positive int>' or 'any'"));
    }
    MXVAL_ASSIGN_OR_RETURN(bk.config, TileConfigFromJson(b.value(), at, o.allow_unknown_keys));
    bk.kernel = kernel;
    if (b.value().contains("kernel")) {
      if (!b.value()["kernel"].is_string() || b.value()["kernel"].get<std::string>().empty()) {
        return absl::InvalidArgumentError(absl::StrCat("config table: ", at, ": 'kernel' must be a non-empty string"));
      }
      bk.kernel = b.value()["kernel"].get<std::string>();
    }
    for (const Bucket& other : buckets) {
      if (other.m_leq == bk.m_leq) {
        return absl::InvalidArgumentError(absl::StrCat("config table: ", where.empty() ? "" : absl::StrCat(where, ": "),
                                                       "buckets '", other.name, "' and '", bk.name, "' cover the same M"));
      }
    }
    buckets.push_back(std::move(bk));
  }
  std::sort(buckets.begin(), buckets.end(), [](const Bucket& a, const Bucket& b) { return a.m_leq < b.m_leq; });
  return buckets;
}

namespace {

// Depth of a JSON value, counted without recursion (a job's table comes from
// any submitter; copying or printing a deeply nested value recurses).
int Depth(const nlohmann::json& root) {
  int deepest = 0;
  std::vector<std::pair<const nlohmann::json*, int>> stack = {{&root, 1}};
  while (!stack.empty()) {
    auto [v, d] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, d);
    if (d > ConfigTable::kMaxDepth) break;
    if (v->is_structured())
      for (const auto& child : *v) stack.push_back({&child, d + 1});
  }
  return deepest;
}

}  // namespace

absl::StatusOr<ConfigTable> ConfigTable::FromJson(const nlohmann::json& j, const ConfigTableOptions& o) {
  if (!j.is_object()) return absl::InvalidArgumentError("config table: top level must be a JSON object");
  if (Depth(j) > kMaxDepth) {
    return absl::InvalidArgumentError(absl::StrCat("config table: nested deeper than ", kMaxDepth, " levels"));
  }
  ConfigTable t;
  t.fit_ksplit_ = !o.allow_unknown_keys;
  // AITER's flat file: only bucket keys at the top level.
  bool flat = !j.empty();
  for (auto it = j.begin(); it != j.end(); ++it) flat &= it.key() == "any" || absl::StartsWith(it.key(), "M_LEQ_");
  if (flat) {
    t.flat_ = true;
    MXVAL_ASSIGN_OR_RETURN(t.ops_["*"]["default"], ParseBuckets(j, "", "", o));
    return t;
  }
  if (j.contains("arch")) {
    if (!j["arch"].is_string()) return absl::InvalidArgumentError("config table: 'arch' must be a string");
    t.arch_ = j["arch"].get<std::string>();
  }
  if (j.contains("kernel")) {
    if (!j["kernel"].is_string()) return absl::InvalidArgumentError("config table: 'kernel' must be a string");
    t.kernel_ = j["kernel"].get<std::string>();
  }
  if (!j.contains("ops") || !j["ops"].is_object() || j["ops"].empty()) {
    return absl::InvalidArgumentError(
        "config table: needs a non-empty 'ops' object, or AITER's flat buckets ('M_LEQ_<x>' and 'any') at the top level");
  }
  for (auto op = j["ops"].begin(); op != j["ops"].end(); ++op) {
    if (!op.value().is_object() || op.value().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("config table: ops.", op.key(), " must be a non-empty object"));
    }
    for (auto shape = op.value().begin(); shape != op.value().end(); ++shape) {
      const std::string where = absl::StrCat(op.key(), "/", shape.key());
      if (shape.key() != "default" && !(absl::StartsWith(shape.key(), "N=") && absl::StrContains(shape.key(), ",K="))) {
        return absl::InvalidArgumentError(absl::StrCat("config table: ", where, ": shape key must be 'default' or 'N=<n>,K=<k>'"));
      }
      MXVAL_ASSIGN_OR_RETURN(t.ops_[op.key()][shape.key()], ParseBuckets(shape.value(), where, t.kernel_, o));
    }
  }
  return t;
}

std::string ConfigTable::EntryName(const std::string& op, const std::string& key, const Bucket& b) const {
  return flat_ ? b.name : absl::StrCat(op, "/", key, "/", b.name);
}

absl::StatusOr<ConfigTable> ConfigTable::FromJsonText(const std::string& text, const ConfigTableOptions& o) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("config table: not valid JSON");
  return FromJson(j, o);
}

absl::StatusOr<ConfigTable> ConfigTable::Load(const std::string& path, const ConfigTableOptions& o) {
  MXVAL_ASSIGN_OR_RETURN(std::string text, ReadFileBytes(path));
  auto t = FromJsonText(text, o);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::StatusOr<DispatchEntry> ConfigTable::Lookup(const std::string& op, int64_t M, int64_t N, int64_t K) const {
  auto o = ops_.find(flat_ ? "*" : op);
  if (o == ops_.end()) return absl::NotFoundError(absl::StrCat("config table has no op '", op, "'"));
  std::string key = absl::StrCat("N=", N, ",K=", K);
  auto s = o->second.find(key);
  if (s == o->second.end()) {
    key = "default";
    s = o->second.find(key);
  }
  if (s == o->second.end()) {
    return absl::NotFoundError(absl::StrCat("config table op '", op, "' has neither 'N=", N, ",K=", K, "' nor 'default'"));
  }
  for (const Bucket& b : s->second) {
    if (M > b.m_leq) continue;
    DispatchEntry e{EntryName(op, key, b), b.kernel, b.config};
    const int64_t kblocks = e.config.block_k > 0 ? (K + e.config.block_k - 1) / e.config.block_k : 1;
    if (fit_ksplit_ && e.config.ksplit > kblocks) {
      e.config.ksplit = static_cast<int>(kblocks);
      if (!e.config.json.empty()) {
        nlohmann::json j = nlohmann::json::parse(e.config.json, nullptr, false);
        if (j.is_object() && j.contains("NUM_KSPLIT")) {
          j["NUM_KSPLIT"] = e.config.ksplit;
          e.config.json = j.dump();
        }
      }
    }
    return e;
  }
  return absl::NotFoundError(absl::StrCat("config table ", op, "/", key, " has no bucket for M=", M, " (add 'any')"));
}

std::vector<DispatchEntry> ConfigTable::AllEntries() const {
  std::vector<DispatchEntry> out;
  for (const auto& [op, shapes] : ops_)
    for (const auto& [key, buckets] : shapes)
      for (const Bucket& b : buckets) out.push_back({EntryName(op, key, b), b.kernel, b.config});
  return out;
}

}  // namespace mxval
