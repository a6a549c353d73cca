// What a task's child process (`mxval __run-task`) writes on stdout: one or
// more TaskResult messages, each preceded by its length as a varint
// (protobuf's delimited form), the last complete one being the task's
// result. The child writes a first one as soon as both sides are checked and
// timed, before it measures the device's roofline (cuBLAS, loaded at run
// time), and the whole result after. So a child that dies while measuring
// the roofline still hands back a complete check: the worker reports it,
// with a note that the roofline was not measured, instead of turning a
// checked task into an infrastructure failure.
#ifndef MXVAL_SERVICE_WORKER_CHILD_RESULTS_H_
#define MXVAL_SERVICE_WORKER_CHILD_RESULTS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {
namespace worker {

// Appends `result` in the delimited form and flushes; false if the stream
// failed.
bool WriteChildResult(const v1::TaskResult& result, std::ostream& out);

// The complete messages of `out`, in order. Stops at the first one that is
// cut short or does not parse (a child killed while writing), so a torn
// tail never yields a half message.
std::vector<v1::TaskResult> ParseChildResults(absl::string_view out);

// The roofline note of the checkpoint (the first message): what the report
// shows for a task whose child ended before writing the whole result.
inline constexpr char kRooflineInterruptedNote[] =
    "not measured: the task's child process ended while measuring the device's roofline";

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_CHILD_RESULTS_H_
