// How reports and triage evidence name a tile config and the kernel run
// with it, so that two runs that differ only in stages, warps or kernel
// never print the same text.
#ifndef MXVAL_PROTO_CONFIG_LABEL_H_
#define MXVAL_PROTO_CONFIG_LABEL_H_

#include <string>

#include "mxval/v1/mxval.pb.h"

namespace mxval {

// "BM128_BN128_BK64_KS1_S4_W9" (the compact form kernels/dispatch parses);
// NUM_KSPLIT 0 prints as 1, unset (0) stages / warps are left out.
std::string ConfigLabel(const v1::TileConfig& c);

// "a16wfp4_wgmma BM128_BN128_BK64_KS1_S4_W9": the run's kernel (or
// "(table)" when the table's default kernel ran) and its config.
std::string RunConfigLabel(const v1::KernelRun& r);

}  // namespace mxval

#endif  // MXVAL_PROTO_CONFIG_LABEL_H_
