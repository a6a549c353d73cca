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

}  // namespace mxval

#endif  // MXVAL_CLIENT_REPORT_H_
