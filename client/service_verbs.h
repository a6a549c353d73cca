// The service verbs of the mxval CLI: serve, worker, submit, get.
#ifndef MXVAL_CLIENT_SERVICE_VERBS_H_
#define MXVAL_CLIENT_SERVICE_VERBS_H_

#include <ostream>
#include <string>
#include <vector>

namespace mxval {

// This executable's path (/proc/self/exe), for spawning task children.
std::string SelfExePath();

int ServeVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int WorkerVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int SubmitVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int DemoVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// "watch", "cancel", "jobs", "workers", "drain".
int AdminVerb(const std::string& verb, const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// Log triage of failing CI jobs (locally, or through a coordinator).
int TriageVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int GetVerb(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace mxval

#endif  // MXVAL_CLIENT_SERVICE_VERBS_H_
