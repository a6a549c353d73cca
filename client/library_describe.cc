#include "client/library_describe.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/service_verbs.h"
#include "kernels/abi/kernel_library.h"
#include "nlohmann/json.hpp"
#include "service/worker/child_runner.h"

namespace mxval {

int DescribeLibraryChild(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.size() != 1) {
    err << "usage: mxval __describe-library FILE\n";
    return 2;
  }
  const std::string& path = args[0];
  auto lib = KernelLibrary::Open(path.find('/') == std::string::npos ? "./" + path : path);
  if (!lib.ok()) {
    err << lib.status().message() << "\n";
    return 2;
  }
  nlohmann::json d;
  d["name"] = (*lib)->name();
  d["build_id"] = (*lib)->build_id();
  nlohmann::json kernels = nlohmann::json::array();
  for (const mxval_kernel* k : (*lib)->kernels()) {
    nlohmann::json kj;
    kj["name"] = k->name ? k->name : "";
    nlohmann::json archs = nlohmann::json::array();
    for (absl::string_view a : absl::StrSplit(k->archs ? k->archs : "", ',', absl::SkipWhitespace()))
      archs.push_back(std::string(absl::StripAsciiWhitespace(a)));
    kj["archs"] = archs;
    nlohmann::json modes = nlohmann::json::array();
    if (k->activation_modes & (1u << MXVAL_ACT_BF16)) modes.push_back("bf16");
    if (k->activation_modes & (1u << MXVAL_ACT_MXFP4_EVEN)) modes.push_back("mxfp4-even");
    kj["activations"] = modes;
    nlohmann::json configs = nlohmann::json::array();
    for (int i = 0; i < k->num_configs && i < 4096; ++i) {
      const mxval_tile_config& c = k->configs[i];
      configs.push_back({{"BLOCK_SIZE_M", c.block_m}, {"BLOCK_SIZE_N", c.block_n}, {"BLOCK_SIZE_K", c.block_k},
                         {"NUM_KSPLIT", c.ksplit}, {"num_stages", c.num_stages}, {"num_warps", c.num_warps}});
    }
    kj["configs"] = configs;
    kernels.push_back(kj);
  }
  d["kernels"] = kernels;
  out << d.dump() << "\n";
  return 0;
}

absl::StatusOr<std::string> DescribeLibraryInChild(const std::string& path) {
  worker::ChildOptions o;
  o.argv = {SelfExePath(), "__describe-library", path};
  o.timeout = absl::Seconds(30);
  o.max_stdout_bytes = 2 << 20;
  auto r = worker::RunChild(o, "");
  if (!r.ok()) return r.status();
  if (!r->success) {
    std::string why(absl::StripAsciiWhitespace(r->stderr_tail));
    return absl::InvalidArgumentError(why.empty() ? absl::StrCat("reading its table: ", r->Describe())
                                                  : absl::StrCat(why, " (", r->Describe(), ")"));
  }
  const nlohmann::json d = nlohmann::json::parse(r->out, nullptr, false);
  if (!d.is_object()) return absl::InvalidArgumentError("reading its table: no declaration came back");
  return d.dump();
}

}  // namespace mxval
