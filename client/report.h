// Job reports for humans and CI: table, JSON, JUnit XML, Markdown.
#ifndef MXVAL_CLIENT_REPORT_H_
#define MXVAL_CLIENT_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mxval/v1/mxval.pb.h"

namespace mxval {

bool IsReportFormat(const std::string& f);
// format: "table" | "json" | "junit" | "markdown". Caller-supplied text is
// escaped for the format (terminal-safe in the table, Markdown- and
// XML-escaped in the others; JSON escapes control characters itself).
// INTERNAL when the job cannot be printed as JSON (a Duration or Timestamp
// outside its range): never partial output.
absl::StatusOr<std::string> RenderReport(const v1::Job& job, const std::string& format);
// RenderReport's text, or its error message.
std::string FormatReport(const v1::Job& job, const std::string& format);
// Text for XML 1.0 content and attributes: markup escaped; characters XML
// forbids (C0 controls but tab and newline) and bytes that are not UTF-8,
// and DEL and C1 controls, shown escaped as \xHH.
std::string XmlEscape(const std::string& s);
// For text placed in Markdown tables and lists: '|', '<', '>', '&', '`',
// '*', '_' and newlines cannot break out of the cell or inject HTML, and
// control characters are shown escaped as \xHH.
std::string MarkdownEscape(const std::string& s);

// A task whose result validates nothing: `task` names it ("kup B=16 N=512
// K=128 M=1 sm_90a", or "3 tasks" for tasks without a result), `reason` says
// why (caller text, unescaped).
struct NotValidatedTask {
  std::string task, reason;
  int tasks = 1;  // how many tasks the entry stands for
};
// The job's NOT VALIDATED tasks: a side whose verdict is VERDICT_ERROR that
// its kernel did not decline (KernelRun.declined; both sides declining is
// "neither kernel takes this case", a legitimate answer), a task triaged
// INFRA or whose attempts all failed on infrastructure, and (one entry) the
// tasks of a DONE job without a result.
std::vector<NotValidatedTask> NotValidatedTasks(const v1::Job& job);

// Which triage classes make a CI gate fail. PR_TOUCHED always does.
struct GatePolicy {
  bool fail_on_untouched = true;  // UNTOUCHED_FAILURE
  bool fail_on_any = false;       // every failure (the pre-triage behaviour)
};
// "pr-touched", "pr-touched,untouched" (default) or "any"; false if unknown.
bool ParseGatePolicy(const std::string& text, GatePolicy* policy);
// 1 when something gates or the job is not DONE; else 4 (kExitNotValidated)
// when a task is NOT VALIDATED (NotValidatedTasks); else 0.
int JobExitCode(const v1::Job& job, const GatePolicy& policy);
int LogTriageExitCode(const v1::TriageLogsResponse& r, const GatePolicy& policy);
// "2 new failures, 5 unrelated" and one section per class with reasons and evidence.
std::string TriageMarkdown(const v1::Job& job);
std::string LogTriageMarkdown(const v1::TriageLogsResponse& r);

}  // namespace mxval

#endif  // MXVAL_CLIENT_REPORT_H_
