// mxval: the command-line entry point. Wiring only; verbs live in cli.cc.
#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return mxval::RunCli(args, std::cout, std::cerr);
}
