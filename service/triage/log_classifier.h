// Log triage's matcher: an ordered rule file (RE2 patterns) applied to a CI
// log. The first rule (highest priority) that matches any line wins; among
// that rule's matches the one nearest the end of the log is taken, since a
// job's fatal error is usually its last (PyTorch's log classifier scans the
// same way). Capture groups become the signature, so "exit code -9" and
// "exit code 1" of one rule are different signatures.
//
// Bounds: patterns are compiled by RE2 (linear time, no backtracking) with
// a memory budget per pattern; a pattern RE2 rejects or that exceeds the
// budget is INVALID_ARGUMENT naming the rule. Logs are matched as bytes
// (Latin-1), so invalid UTF-8 cannot break matching; reported text is
// converted to valid UTF-8. Lines longer than max_line_bytes are matched on
// their first max_line_bytes.
#ifndef MXVAL_SERVICE_TRIAGE_LOG_CLASSIFIER_H_
#define MXVAL_SERVICE_TRIAGE_LOG_CLASSIFIER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mxval/v1/mxval.pb.h"
#include "re2/re2.h"
#include "re2/set.h"

namespace mxval {
namespace triage {

struct ClassifierOptions {
  int64_t max_pattern_bytes = 4096;
  int64_t max_rules = 500;
  int64_t regex_max_mem = 1 << 20;  // per compiled pattern
  size_t max_line_bytes = 8192;
  int context_lines = 2;            // lines before the match to report
};

struct LogMatch {
  int rule = -1;  // index into the rule file
  std::string rule_name;
  std::string signature;  // "name" or "name: cap1 cap2"
  bool infra = false;
  int64_t line = 0;  // 1-based line of the match
  std::vector<v1::LogLine> lines;  // context + the matched line
};

class LogClassifier {
 public:
  // INVALID_ARGUMENT naming rules[i].field for an empty/duplicate/malformed
  // name, an empty or oversized pattern, or one RE2 rejects.
  static absl::StatusOr<std::unique_ptr<LogClassifier>> Create(const v1::LogRules& rules,
                                                               ClassifierOptions options = {});
  // nullopt when no rule matches.
  std::optional<LogMatch> Classify(absl::string_view log) const;
  // The first rule in file order that matches one line, or -1; its
  // signature ("name" or "name: cap1 cap2") in *signature.
  int MatchLine(absl::string_view line, std::string* signature) const;
  const v1::LogRules& rules() const { return rules_; }

 private:
  LogClassifier(v1::LogRules rules, ClassifierOptions o) : rules_(std::move(rules)), options_(o) {}
  v1::LogRules rules_;
  ClassifierOptions options_;
  std::vector<std::unique_ptr<RE2>> patterns_;
  std::unique_ptr<RE2::Set> set_;
};

// Bytes -> valid UTF-8 (invalid sequences become U+FFFD).
std::string ToValidUtf8(absl::string_view bytes);

}  // namespace triage
}  // namespace mxval

#endif  // MXVAL_SERVICE_TRIAGE_LOG_CLASSIFIER_H_
