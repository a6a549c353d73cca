#include "service/triage/triage_config.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_read.h"
#include "common/yaml_json.h"
#include "google/protobuf/util/json_util.h"
#include "mxval/triage_defaults.h"

namespace mxval {
namespace triage {
namespace {

template <typename Msg>
absl::StatusOr<Msg> Parse(const std::string& text, bool yaml, const std::string& what) {
  if (text.size() > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": larger than ", kMaxConfigFileBytes, " bytes"));
  }
  std::string json = text;
  if (yaml) {
    auto j = YamlToJson(text);
    if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", j.status().message()));
    json = *j;
  }
  Msg m;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  const auto st = google::protobuf::util::JsonStringToMessage(json, &m, o);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", st.message().as_string()));
  return m;
}

// A rule or ownership file: a regular file or a pipe (`--rules <(...)`), at
// most kMaxConfigFileBytes.
absl::StatusOr<std::string> ReadSmall(const std::string& path) {
  return ReadFileBounded(path, static_cast<int64_t>(kMaxConfigFileBytes), /*allow_pipe=*/true);
}

}  // namespace

absl::StatusOr<v1::LogRules> ParseLogRules(const std::string& text, bool yaml, const std::string& what) {
  return Parse<v1::LogRules>(text, yaml, what);
}
absl::StatusOr<v1::OwnershipMap> ParseOwnership(const std::string& text, bool yaml, const std::string& what) {
  return Parse<v1::OwnershipMap>(text, yaml, what);
}

absl::StatusOr<v1::LogRules> LoadLogRules(const std::string& path) {
  auto text = ReadSmall(path);
  if (!text.ok()) return text.status();
  return ParseLogRules(*text, IsYamlConfig(path, *text), path);
}

absl::StatusOr<v1::OwnershipMap> LoadOwnership(const std::string& path) {
  auto text = ReadSmall(path);
  if (!text.ok()) return text.status();
  return ParseOwnership(*text, IsYamlConfig(path, *text), path);
}

const v1::LogRules& DefaultLogRules() {
  static const v1::LogRules* r = new v1::LogRules(*ParseLogRules(kDefaultLogRulesYaml, true, "built-in rules"));
  return *r;
}

const v1::OwnershipMap& DefaultOwnership() {
  static const v1::OwnershipMap* m =
      new v1::OwnershipMap(*ParseOwnership(kDefaultOwnershipYaml, true, "built-in ownership"));
  return *m;
}

}  // namespace triage
}  // namespace mxval
