#include "service/coordinator/store_codec.h"

#include <random>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "service/coordinator/store.h"

namespace mxval {
namespace coordinator {

std::string NewUploadKey(absl::Time now) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("upload/%020d/%016x", absl::ToUnixMicros(now), rng());
}

std::string StaleUploadBound(absl::Time now) {
  return absl::StrFormat("upload/%020d/", absl::ToUnixMicros(now - absl::Hours(24)));
}

int64_t TimeToUs(absl::Time t) { return t == absl::InfinitePast() ? kNoTime : absl::ToUnixMicros(t); }
absl::Time TimeFromUs(int64_t us) { return us == kNoTime ? absl::InfinitePast() : absl::FromUnixMicros(us); }

std::string AttemptsToJson(const std::vector<AttemptRecord>& attempts) {
  nlohmann::json a = nlohmann::json::array();
  for (const AttemptRecord& r : attempts) {
    a.push_back({{"w", r.worker_id}, {"s", TimeToUs(r.started)}, {"f", TimeToUs(r.finished)}, {"i", r.infra_failure},
                 {"d", r.detail}, {"v", r.device}});
  }
  return a.dump();
}

std::vector<AttemptRecord> AttemptsFromJson(const std::string& text) {
  std::vector<AttemptRecord> out;
  nlohmann::json a = nlohmann::json::parse(text, nullptr, false);
  if (!a.is_array()) return out;
  for (const auto& r : a) {
    if (!r.is_object()) continue;
    out.push_back(AttemptRecord{r.value("w", ""), TimeFromUs(r.value("s", kNoTime)), TimeFromUs(r.value("f", kNoTime)),
                                r.value("i", false), r.value("d", ""), r.value("v", 0)});
  }
  return out;
}

int64_t TaskSeq(const std::string& task_id) {
  const size_t p = task_id.rfind("-t");
  int64_t i = 0;
  if (p == std::string::npos) return 0;
  for (size_t k = p + 2; k < task_id.size() && task_id[k] >= '0' && task_id[k] <= '9' && i < (int64_t{1} << 40); ++k) {
    i = i * 10 + (task_id[k] - '0');
  }
  return i;
}

std::string LastWorker(const TaskRecord& t) { return t.attempts.empty() ? std::string() : t.attempts.back().worker_id; }
int64_t LastFinishedUs(const TaskRecord& t) { return t.attempts.empty() ? kNoTime : TimeToUs(t.attempts.back().finished); }

}  // namespace coordinator
}  // namespace mxval
