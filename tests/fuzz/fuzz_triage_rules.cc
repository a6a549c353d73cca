// The triage rule loader and matcher. Input: a rule file (YAML or JSON, by
// the first byte), a NUL byte, then a log. The rules are loaded as
// `--triage-rules` would be and, when valid, run over the log; the log is
// also run through the built-in rules, and the ownership loader reads the
// rule text too.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "service/triage/log_classifier.h"
#include "service/triage/ownership.h"
#include "service/triage/triage_config.h"

using namespace mxval::triage;  // NOLINT

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (256 << 10)) return 0;
  const bool yaml = data[0] & 1;
  const char* begin = reinterpret_cast<const char*>(data) + 1;
  const char* end = reinterpret_cast<const char*>(data) + size;
  const char* nul = static_cast<const char*>(std::memchr(begin, 0, end - begin));
  const std::string rules_text(begin, nul ? nul : end);
  const absl::string_view log = nul ? absl::string_view(nul + 1, end - nul - 1) : absl::string_view();
  static const auto* builtin = LogClassifier::Create(DefaultLogRules())->release();
  if (auto m = builtin->Classify(log); m && m->rule_name.empty()) abort();
  auto rules = ParseLogRules(rules_text, yaml, "fuzz");
  if (rules.ok()) {
    auto c = LogClassifier::Create(*rules);
    if (c.ok()) {
      auto m = (*c)->Classify(log);
      if (m && (m->rule < 0 || m->rule >= rules->rules_size())) abort();
      if (m) {
        const std::string s = ToValidUtf8(m->signature);
        if (s.empty() && !m->signature.empty()) abort();
      }
    }
  }
  auto own = ParseOwnership(rules_text, yaml, "fuzz");
  if (own.ok()) (void)Ownership::Create(*own);
  return 0;
}
