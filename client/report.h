// Job reports for humans and CI: table, JSON, JUnit XML, Markdown.
#ifndef MXVAL_CLIENT_REPORT_H_
#define MXVAL_CLIENT_REPORT_H_

#include <string>

#include "mxval/v1/mxval.pb.h"

namespace mxval {

bool IsReportFormat(const std::string& f);
// format: "table" | "json" | "junit" | "markdown".
std::string FormatReport(const v1::Job& job, const std::string& format);
std::string XmlEscape(const std::string& s);
// For text placed in Markdown tables and lists: '|', '<', '>', '&', '`',
// '*', '_' and newlines cannot break out of the cell or inject HTML.
std::string MarkdownEscape(const std::string& s);

// Which triage classes make a CI gate fail. PR_TOUCHED always does.
struct GatePolicy {
  bool fail_on_untouched = true;  // UNTOUCHED_FAILURE
  bool fail_on_any = false;       // every failure (the pre-triage behaviour)
};
// "pr-touched", "pr-touched,untouched" (default) or "any"; false if unknown.
bool ParseGatePolicy(const std::string& text, GatePolicy* policy);
// 0 when nothing gates (and the job is DONE), 1 otherwise.
int JobExitCode(const v1::Job& job, const GatePolicy& policy);
int LogTriageExitCode(const v1::TriageLogsResponse& r, const GatePolicy& policy);
// "2 new failures, 5 unrelated" and one section per class with reasons and evidence.
std::string TriageMarkdown(const v1::Job& job);
std::string LogTriageMarkdown(const v1::TriageLogsResponse& r);

}  // namespace mxval

#endif  // MXVAL_CLIENT_REPORT_H_
