#include "proto/config_label.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/dispatch/tile_config.h"

namespace mxval {

std::string ConfigLabel(const v1::TileConfig& c) {
  std::string s = absl::StrCat("BM", c.block_m(), "_BN", c.block_n(), "_BK", c.block_k(), "_KS", std::max(1, c.ksplit()));
  if (c.num_stages() > 0) absl::StrAppend(&s, "_S", c.num_stages());
  if (c.num_warps() > 0) absl::StrAppend(&s, "_W", c.num_warps());
  return s;
}

std::string RunConfigLabel(const v1::KernelRun& r) {
  std::string label =
      absl::StrCat(r.kernel().kernel().empty() ? "(table)" : r.kernel().kernel(), " ", ConfigLabel(r.config()));
  // A Python kernel's config carries more than the six fields (its tuning
  // keys): a retune of those alone must show in the label too.
  const std::string extras = ConfigExtras(r.config_json());
  if (!extras.empty()) absl::StrAppend(&label, " {", extras, "}");
  return label;
}

}  // namespace mxval
