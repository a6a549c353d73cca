// Bounds on what a caller stores or has echoed: every string field's length
// and characters, and every repeated field's count, of any request message,
// checked by reflection so a field added to the proto is bounded too.
//
// Defaults (RequestBounds): strings at most 1 KiB and without control
// characters (C0, DEL, C1: a terminal or log would interpret them), repeated
// fields at most 4,096 entries; per-field overrides by the field's full proto
// name. Text fields that carry file content (a dispatch table's JSON) allow
// tab, newline and carriage return. Errors are INVALID_ARGUMENT naming the
// field's path as the planner does ("spec.pull_request.changed_files[3]").
#ifndef MXVAL_SERVICE_COORDINATOR_REQUEST_BOUNDS_H_
#define MXVAL_SERVICE_COORDINATOR_REQUEST_BOUNDS_H_

#include <cstddef>
#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace coordinator {

struct RequestBounds {
  size_t max_string_bytes = 1024;
  int max_repeated = 4096;
  // Full field name ("mxval.v1.ConfigTable.json") -> bound.
  std::map<std::string, size_t> string_bytes;
  std::map<std::string, int> repeated;
  // Fields whose text may hold tab, newline and carriage return.
  std::set<std::string> multiline;
};

// The bounds of every caller-supplied message of the API (job specs, worker
// registrations, heartbeats, library registrations).
const RequestBounds& ApiBounds();

// INVALID_ARGUMENT naming `path`.field for the first field out of bounds.
absl::Status CheckBounds(const google::protobuf::Message& m, const std::string& path,
                         const RequestBounds& bounds = ApiBounds());

// The first control character (C0 other than those `allow` lists, DEL, or a
// C1 code point) in UTF-8 `text`, as its byte offset; npos if none.
size_t FindControlCharacter(absl::string_view text, absl::string_view allow = "");

// A worker's registration: ids and names bounded and printable, 1 to 64
// devices with distinct indexes in [0, 1023], each with an arch of
// [a-z0-9_] (1 to 32 bytes). INVALID_ARGUMENT naming the field.
absl::Status ValidateRegistration(const v1::RegisterWorkerRequest& req);

// The job spec's deadline: within google.protobuf.Duration's range, positive
// and at most kMaxDeadline. INVALID_ARGUMENT naming spec.deadline.
absl::Status ValidateDeadline(const google::protobuf::Duration& d);

inline constexpr int kMaxWorkerDevices = 64;
// A job spec's serialized size: a job with its spec stays well inside one
// 16 MiB message.
inline constexpr size_t kMaxSpecBytes = 8 << 20;
inline constexpr int kMaxDeviceIndex = 1023;
inline constexpr int64_t kMaxDeadlineSeconds = 30 * 24 * 3600;

}  // namespace coordinator
}  // namespace mxval

#endif  // MXVAL_SERVICE_COORDINATOR_REQUEST_BOUNDS_H_
