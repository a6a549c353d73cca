#include "service/triage/log_classifier.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "re2/re2.h"

namespace mxval {
namespace triage {
namespace {

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  return true;
}

RE2::Options PatternOptions(const ClassifierOptions& o) {
  RE2::Options opt;
  opt.set_encoding(RE2::Options::EncodingLatin1);  // logs are bytes
  opt.set_max_mem(o.regex_max_mem);
  opt.set_log_errors(false);
  return opt;
}

// Trims a trailing '\r' (Windows runners).
absl::string_view Line(absl::string_view log, size_t begin, size_t end) {
  absl::string_view l = log.substr(begin, end - begin);
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  return l;
}

}  // namespace

std::string ToValidUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (int k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok && n == 2) ok = c >= 0xC2;                                                    // no overlongs
    if (ok && n == 3) {
      const unsigned char c1 = s[i + 1];
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
    }
    if (ok && n == 4) {
      const unsigned char c1 = s[i + 1];
      ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok && c != 0) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<LogClassifier>> LogClassifier::Create(const v1::LogRules& rules, ClassifierOptions o) {
  if (rules.rules_size() == 0) return absl::InvalidArgumentError("rules: empty rule file");
  if (rules.rules_size() > o.max_rules) {
    return absl::InvalidArgumentError(absl::StrCat("rules: ", rules.rules_size(), " rules (at most ", o.max_rules, ")"));
  }
  std::unique_ptr<LogClassifier> c(new LogClassifier(rules, o));
  const RE2::Options opt = PatternOptions(o);
  c->set_ = std::make_unique<RE2::Set>(opt, RE2::UNANCHORED);
  std::set<std::string> names;
  for (int i = 0; i < rules.rules_size(); ++i) {
    const v1::LogRule& r = rules.rules(i);
    const std::string f = absl::StrCat("rules[", i, "]");
    if (!ValidName(r.name())) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".name: '", r.name(), "' is not [a-z0-9_-]{1,64}"));
    }
    if (!names.insert(r.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".name: '", r.name(), "' is used twice"));
    }
    if (r.pattern().empty()) return absl::InvalidArgumentError(absl::StrCat(f, ".pattern: empty"));
    if (static_cast<int64_t>(r.pattern().size()) > o.max_pattern_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".pattern: longer than ", o.max_pattern_bytes, " bytes"));
    }
    auto re = std::make_unique<RE2>(r.pattern(), opt);
    if (!re->ok()) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".pattern (", r.name(), "): ", re->error()));
    }
    std::string err;
    if (c->set_->Add(r.pattern(), &err) != i) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".pattern (", r.name(), "): ", err));
    }
    c->patterns_.push_back(std::move(re));
  }
  if (!c->set_->Compile()) {
    return absl::InvalidArgumentError("rules: the patterns together exceed the matcher's memory budget");
  }
  return c;
}

int LogClassifier::MatchLine(absl::string_view line, std::string* signature) const {
  if (line.size() > options_.max_line_bytes) line = line.substr(0, options_.max_line_bytes);
  std::vector<int> hits;
  if (!set_->Match(re2::StringPiece(line.data(), line.size()), &hits) || hits.empty()) return -1;
  const int best = *std::min_element(hits.begin(), hits.end());
  if (signature != nullptr) {
    const RE2& re = *patterns_[best];
    const int ngroups = re.NumberOfCapturingGroups();
    std::vector<re2::StringPiece> groups(ngroups + 1);
    std::vector<std::string> caps;
    if (re.Match(re2::StringPiece(line.data(), line.size()), 0, line.size(), RE2::UNANCHORED, groups.data(),
                 ngroups + 1)) {
      for (int g = 1; g <= ngroups; ++g) {
        if (groups[g].empty()) continue;
        caps.push_back(ToValidUtf8(absl::string_view(groups[g].data(), std::min<size_t>(groups[g].size(), 200))));
      }
    }
    const std::string& name = rules_.rules(best).name();
    *signature = caps.empty() ? name : absl::StrCat(name, ": ", absl::StrJoin(caps, " "));
  }
  return best;
}

std::optional<LogMatch> LogClassifier::Classify(absl::string_view log) const {
  // Line starts, so the scan can run from the end.
  std::vector<size_t> starts;
  starts.push_back(0);
  for (size_t i = 0; i < log.size(); ++i)
    if (log[i] == '\n' && i + 1 < log.size()) starts.push_back(i + 1);
  int best = -1;
  int64_t best_line = -1;
  std::vector<int> hits;
  for (int64_t li = static_cast<int64_t>(starts.size()) - 1; li >= 0 && best != 0; --li) {
    const size_t b = starts[li];
    size_t e = log.find('\n', b);
    if (e == absl::string_view::npos) e = log.size();
    absl::string_view line = Line(log, b, e);
    if (line.size() > options_.max_line_bytes) line = line.substr(0, options_.max_line_bytes);
    hits.clear();
    if (!set_->Match(re2::StringPiece(line.data(), line.size()), &hits)) continue;
    for (int h : hits) {
      if (best == -1 || h < best) {  // a higher-priority rule; the first seen from the end is the latest
        best = h;
        best_line = li;
      }
    }
  }
  if (best < 0) return std::nullopt;
  const v1::LogRule& rule = rules_.rules(best);
  LogMatch m;
  m.rule = best;
  m.rule_name = rule.name();
  m.infra = rule.infra();
  m.line = best_line + 1;
  auto line_at = [&](int64_t li) {
    const size_t b = starts[li];
    size_t e = log.find('\n', b);
    if (e == absl::string_view::npos) e = log.size();
    absl::string_view l = Line(log, b, e);
    return l.size() > options_.max_line_bytes ? l.substr(0, options_.max_line_bytes) : l;
  };
  // The winning line's signature, as MatchLine gives it (its first rule is
  // `best`: no rule before it matched anywhere).
  MatchLine(line_at(best_line), &m.signature);
  for (int64_t li = std::max<int64_t>(0, best_line - options_.context_lines); li <= best_line; ++li) {
    v1::LogLine l;
    l.set_number(li + 1);
    l.set_text(ToValidUtf8(line_at(li)));
    m.lines.push_back(std::move(l));
  }
  return m;
}

}  // namespace triage
}  // namespace mxval
