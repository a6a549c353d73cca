// YAML -> JSON (specs, rules, ownership and auth config go through it). Every
// input ends in valid JSON or an INVALID_ARGUMENT with a message; the output
// stays within what the alias budget allows.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/yaml_json.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (64 << 10)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto json = mxval::YamlToJson(text);
  if (!json.ok()) {
    if (json.status().code() != absl::StatusCode::kInvalidArgument || json.status().message().empty()) abort();
    return 0;
  }
  if (nlohmann::json::parse(*json, nullptr, false).is_discarded()) abort();
  // Each input byte makes at most a few nodes; aliases add at most the budget.
  if (json->size() > 64 * (size + 16) + 64 * static_cast<size_t>(mxval::kMaxYamlAliasNodes)) abort();
  return 0;
}
