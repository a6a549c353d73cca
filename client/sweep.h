// The local validation sweep behind `mxval run`: for each shape x M, pick the
// config (dispatch table or override), build a guarded case, run the CPU
// kernel and the reference, and collect verdicts and timings.
#ifndef MXVAL_CLIENT_SWEEP_H_
#define MXVAL_CLIENT_SWEEP_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/dispatch/config_table.h"
#include "nlohmann/json.hpp"
#include "validation/presets.h"
#include "validation/validation_case.h"

namespace mxval {

struct SweepOptions {
  std::vector<OpShape> shapes;
  std::vector<int64_t> ms;
  const ConfigTable* table = nullptr;        // used unless config_override
  std::optional<TileConfig> config_override;
  ActivationMode activations = ActivationMode::kBf16;
  GeneratorSpec x_gen, w_gen;
  mxfp4::ScaleRule w_rule = mxfp4::ScaleRule::kEven;
  uint64_t seed = 1;
  CheckOptions check;
  // Weights from files (the single shape in `shapes` must match them).
  std::shared_ptr<const std::vector<uint8_t>> w_packed_file, w_scales_file;
};

struct SweepRow {
  OpShape shape;
  int64_t M = 0;
  std::string entry;   // dispatch entry name or "override"
  TileConfig config;
  absl::Status status; // non-OK: the case could not run (bad config, ...)
  CaseResult result;
  bool passed() const { return status.ok() && result.accuracy.verdict == reference::Verdict::kPass; }
};

// Runs every case; calls on_row after each (for streaming output).
std::vector<SweepRow> RunSweep(const SweepOptions& options, const std::function<void(const SweepRow&)>& on_row);

std::string FormatSweepHeader();
std::string FormatSweepRow(const SweepRow& row);
nlohmann::json SweepToJson(const SweepOptions& options, const std::vector<SweepRow>& rows);

// The built-in CPU dispatch table (kernels/configs/cpu.json, embedded at build time).
const char* DefaultCpuTableJson();

}  // namespace mxval

#endif  // MXVAL_CLIENT_SWEEP_H_
