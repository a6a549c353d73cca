#include "client/spec_file.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_read.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace mxval {

absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, bool yaml) {
  std::string json = text;
  if (yaml) {
    auto j = YamlToJson(text);
    if (!j.ok()) return j.status();
    json = *j;
  }
  v1::JobSpec spec;
  const auto st = google::protobuf::util::JsonStringToMessage(json, &spec);
  if (!st.ok()) return absl::InvalidArgumentError(st.message().as_string());
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path) {
  auto bytes = ReadFileBounded(path, kMaxSpecFileBytes, /*allow_pipe=*/true);
  if (!bytes.ok()) return bytes.status();
  auto spec = ParseJobSpec(*bytes, IsYamlConfig(path, *bytes));
  if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", spec.status().message()));
  return spec;
}

}  // namespace mxval
