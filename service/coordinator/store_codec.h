// Row encodings shared by the SQLite and PostgreSQL stores: times as Unix
// microseconds (kNone for "never"), attempts as a compact JSON array.
#ifndef MXVAL_SERVICE_COORDINATOR_STORE_CODEC_H_
#define MXVAL_SERVICE_COORDINATOR_STORE_CODEC_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "service/coordinator/scheduler_types.h"

namespace mxval {
namespace coordinator {

inline constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min();

int64_t TimeToUs(absl::Time t);  // InfinitePast -> kNoTime
absl::Time TimeFromUs(int64_t us);
std::string AttemptsToJson(const std::vector<AttemptRecord>& attempts);
std::vector<AttemptRecord> AttemptsFromJson(const std::string& text);  // empty if malformed
// A task's position in its job (task ids are "<job>-t<i>").
int64_t TaskSeq(const std::string& task_id);
// The worker and end time of the last attempt (claims skip a task for the
// worker it just failed on).
std::string LastWorker(const TaskRecord& t);
int64_t LastFinishedUs(const TaskRecord& t);

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_STORE_CODEC_H_
