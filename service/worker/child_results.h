// What a task's child process (`mxval __run-task`) writes on stdout: a
// header line (kChildResultsHeader), then one or more TaskResult messages,
// each preceded by its length as a varint (protobuf's delimited form), the
// last complete one being the task's result. The child writes a first one
// as soon as both sides are checked and timed, before it measures the
// device's roofline (cuBLAS, loaded at run time), and the whole result after. So a child that dies while measuring
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

// The first bytes of the child's stdout, before any message: without them
// (an older mxval as the child, whose stdout was one bare TaskResult, or any
// other program) the output is not read as results at all, since bare
// protobuf bytes can parse as a wrong delimited message.
inline constexpr char kChildResultsHeader[] = "mxval-task-results-v1\n";

// Writes kChildResultsHeader; false if the stream failed.
bool WriteChildResultsHeader(std::ostream& out);

// Appends `result` in the delimited form and flushes; false if the stream
// failed.
bool WriteChildResult(const v1::TaskResult& result, std::ostream& out);

// The complete messages of `out` after the header, in order; none without
// the header. Stops at the first one that is cut short or does not parse (a
// child killed while writing), so a torn tail never yields a half message.
std::vector<v1::TaskResult> ParseChildResults(absl::string_view out);

// The roofline note of the checkpoint (the first message): what the report
// shows for a task whose child ended before writing the whole result.
inline constexpr char kRooflineInterruptedNote[] =
    "not measured: the task's child process ended while measuring the device's roofline";

}  // namespace worker
}  // namespace mxval

#endif  // MXVAL_SERVICE_WORKER_CHILD_RESULTS_H_
