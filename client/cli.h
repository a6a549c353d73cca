// The `mxval` command line: verb dispatch and the verbs themselves.
//
// Exit codes (stable, for CI scripts):
//   0  success; for `run`, every case passed
//   1  `run`: at least one case failed its accuracy check or could not run
//   2  bad usage or bad input (unknown flag, malformed value, unreadable or
//      corrupt tensor file, inconsistent shapes): the message names it
//   3  internal error (I/O failure writing results, ...)
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

// args excludes the program name.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace mxval

#endif  // MXVAL_CLIENT_CLI_H_
