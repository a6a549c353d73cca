// A small command-line flag parser for the mxval verbs.
//
// Accepts "--name value" and "--name=value"; "--flag" for booleans; "--help".
// Unknown flags, missing values, bad numbers and missing required flags are
// INVALID_ARGUMENT naming the flag (the CLI turns them into exit code 2).
#ifndef MXVAL_CLIENT_FLAGS_H_
#define MXVAL_CLIENT_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mxval {

class FlagSet {
 public:
  FlagSet(std::string verb, std::string summary) : verb_(std::move(verb)), summary_(std::move(summary)) {}

  void String(const std::string& name, std::string* dst, const std::string& help, bool required = false);
  void Int(const std::string& name, int64_t* dst, const std::string& help);
  void Double(const std::string& name, double* dst, const std::string& help);
  void Bool(const std::string& name, bool* dst, const std::string& help);

  // Parses args (without the program and verb). Sets help_requested() on --help.
  absl::Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_; }
  bool WasSet(const std::string& name) const;
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool };
  struct Flag {
    std::string name, help;
    Kind kind;
    void* dst;
    bool required = false, set = false;
    std::string default_text;
  };
  Flag* Find(const std::string& name);
  std::string verb_, summary_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace mxval

#endif  // MXVAL_CLIENT_FLAGS_H_
