#include "kernels/dispatch/config_table.h"

#include <algorithm>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor_io.h"

namespace mxval {

absl::StatusOr<ConfigTable> ConfigTable::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("config table: top level must be a JSON object");
  ConfigTable t;
  if (j.contains("arch")) {
    if (!j["arch"].is_string()) return absl::InvalidArgumentError("config table: 'arch' must be a string");
    t.arch_ = j["arch"].get<std::string>();
  }
  if (j.contains("kernel")) {
    if (!j["kernel"].is_string()) return absl::InvalidArgumentError("config table: 'kernel' must be a string");
    t.kernel_ = j["kernel"].get<std::string>();
  }
  if (!j.contains("ops") || !j["ops"].is_object() || j["ops"].empty()) {
    return absl::InvalidArgumentError("config table: needs a non-empty 'ops' object");
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
      if (!shape.value().is_object() || shape.value().empty()) {
        return absl::InvalidArgumentError(absl::StrCat("config table: ", where, " must be a non-empty object of buckets"));
      }
      std::vector<Bucket> buckets;
      for (auto b = shape.value().begin(); b != shape.value().end(); ++b) {
        Bucket bk;
        bk.name = b.key();
        if (b.key() == "any") {
          bk.m_leq = std::numeric_limits<int64_t>::max();
        } else if (!absl::StartsWith(b.key(), "M_LEQ_") || !absl::SimpleAtoi(b.key().substr(6), &bk.m_leq) ||
                   bk.m_leq < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("config table: ", where, ": bucket '", b.key(), "' is not 'M_LEQ_<positive int>' or 'any'"));
        }
        MXVAL_ASSIGN_OR_RETURN(bk.config, TileConfigFromJson(b.value(), absl::StrCat(where, "/", b.key())));
        bk.kernel = t.kernel_;
        if (b.value().contains("kernel")) {
          if (!b.value()["kernel"].is_string() || b.value()["kernel"].get<std::string>().empty()) {
            return absl::InvalidArgumentError(absl::StrCat("config table: ", where, "/", b.key(), ": 'kernel' must be a non-empty string"));
          }
          bk.kernel = b.value()["kernel"].get<std::string>();
        }
        for (const Bucket& o : buckets) {
          if (o.m_leq == bk.m_leq) {
            return absl::InvalidArgumentError(absl::StrCat("config table: ", where, ": buckets '", o.name, "' and '",
                                                           bk.name, "' cover the same M"));
          }
        }
        buckets.push_back(std::move(bk));
      }
      std::sort(buckets.begin(), buckets.end(), [](const Bucket& a, const Bucket& b) { return a.m_leq < b.m_leq; });
      t.ops_[op.key()][shape.key()] = std::move(buckets);
    }
  }
  return t;
}

absl::StatusOr<ConfigTable> ConfigTable::FromJsonText(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("config table: not valid JSON");
  return FromJson(j);
}

absl::StatusOr<ConfigTable> ConfigTable::Load(const std::string& path) {
  MXVAL_ASSIGN_OR_RETURN(std::string text, ReadFileBytes(path));
  auto t = FromJsonText(text);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::StatusOr<DispatchEntry> ConfigTable::Lookup(const std::string& op, int64_t M, int64_t N, int64_t K) const {
  auto o = ops_.find(op);
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
    if (M <= b.m_leq) return DispatchEntry{absl::StrCat(op, "/", key, "/", b.name), b.kernel, b.config};
  }
  return absl::NotFoundError(absl::StrCat("config table ", op, "/", key, " has no bucket for M=", M, " (add 'any')"));
}

std::vector<DispatchEntry> ConfigTable::AllEntries() const {
  std::vector<DispatchEntry> out;
  for (const auto& [op, shapes] : ops_)
    for (const auto& [key, buckets] : shapes)
      for (const Bucket& b : buckets) out.push_back({absl::StrCat(op, "/", key, "/", b.name), b.kernel, b.config});
  return out;
}

}  // namespace mxval
