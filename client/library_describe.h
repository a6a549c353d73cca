// What a compiled kernel library declares (its kernels, their archs and
// activation modes, its build id), read from its kernel table in a child
// process so that nothing of the library runs in the caller's process (an
// admin registering a pull request's build, say).
#ifndef MXVAL_CLIENT_LIBRARY_DESCRIBE_H_
#define MXVAL_CLIENT_LIBRARY_DESCRIBE_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mxval {

// `mxval __describe-library FILE`: loads FILE and prints its declaration as
// JSON: {"build_id", "name", "abi_version", "kernels": [{"name", "archs",
// "activations", "configs"}]}. Exit 0, or 2 with the loader's error.
int DescribeLibraryChild(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Runs this executable's __describe-library on `path` in a child (killed
// after 30 s); the declaration's JSON text. INVALID_ARGUMENT with the
// child's error when the library does not load or the child dies.
absl::StatusOr<std::string> DescribeLibraryInChild(const std::string& path);

}  // namespace mxval

#endif  // MXVAL_CLIENT_LIBRARY_DESCRIBE_H_
