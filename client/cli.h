// The `mxval` command line: verb dispatch and the verbs themselves.
//
// Exit codes (stable, for CI scripts):
//   0  success; for `run`, every case passed; for a job (`submit --wait`,
//      `get`, `watch`), nothing the gate (--fail-on) fails on and every task
//      validated
//   1  `run`: at least one case failed its accuracy check or could not run;
//      a job: a failure the gate counts, or the job did not finish
//   2  bad usage or bad input (unknown flag, malformed value, unreadable or
//      corrupt tensor file, inconsistent shapes, a spec the coordinator
//      rejects, an unknown job, missing credentials): the message names it
//   3  internal error (I/O failure writing results, output that cannot be
//      printed) or the coordinator is unavailable
//   4  a job the gate passes but that is NOT VALIDATED: some task's side
//      could not run (an ERROR it did not decline), its attempts failed on
//      infrastructure, or it has no result
//   5  refused for a limit (RESOURCE_EXHAUSTED: a rate or quota limit):
//      retry later, after the wait the message gives
#ifndef MXVAL_CLIENT_CLI_H_
#define MXVAL_CLIENT_CLI_H_

#include <ostream>
#include <string>
#include <vector>

namespace mxval {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;
inline constexpr int kExitNotValidated = 4;
inline constexpr int kExitLimited = 5;

// args excludes the program name.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace mxval

#endif  // MXVAL_CLIENT_CLI_H_
