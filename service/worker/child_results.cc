#include "service/worker/child_results.h"

#include "absl/strings/strip.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/delimited_message_util.h"

namespace mxval {
namespace worker {

bool WriteChildResultsHeader(std::ostream& out) {
  out << kChildResultsHeader;
  out.flush();
  return static_cast<bool>(out);
}

bool WriteChildResult(const v1::TaskResult& result, std::ostream& out) {
  if (!google::protobuf::util::SerializeDelimitedToOstream(result, &out)) return false;
  out.flush();
  return static_cast<bool>(out);
}

std::vector<v1::TaskResult> ParseChildResults(absl::string_view out) {
  std::vector<v1::TaskResult> results;
  if (!absl::ConsumePrefix(&out, kChildResultsHeader)) return results;
  google::protobuf::io::ArrayInputStream in(out.data(), static_cast<int>(out.size()));
  google::protobuf::io::CodedInputStream coded(&in);
  while (!coded.ExpectAtEnd()) {
    v1::TaskResult r;
    bool clean_eof = false;
    if (!google::protobuf::util::ParseDelimitedFromCodedStream(&r, &coded, &clean_eof)) break;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace worker
}  // namespace mxval
