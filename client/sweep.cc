#include "client/sweep.h"

#include "absl/strings/str_format.h"
#include "kernels/cpu/a16wfp4_cpu.h"
#include "kernels/mxfp4/quantize.h"
#include "mxval/default_tables.h"

namespace mxval {

const char* DefaultCpuTableJson() { return kDefaultCpuTableJson; }

std::vector<SweepRow> RunSweep(const SweepOptions& o, const std::function<void(const SweepRow&)>& on_row) {
  std::vector<SweepRow> rows;
  for (const OpShape& shape : o.shapes) {
    for (int64_t M : o.ms) {
      SweepRow row;
      row.shape = shape;
      row.M = M;
      if (o.config_override) {
        row.entry = "override";
        row.config = *o.config_override;
      } else {
        auto e = o.table->Lookup(shape.op, M, shape.N, shape.K);
        if (e.ok()) {
          row.entry = e->name;
          row.config = e->config;
        } else {
          row.status = e.status();
        }
      }
      if (row.status.ok()) row.status = cpu::CanImplement({shape.B, M, shape.N, shape.K}, row.config);
      if (row.status.ok()) {
        CaseSpec spec = SpecForShape(shape, M);
        spec.activations = o.activations;
        spec.x_gen = o.x_gen;
        spec.w_gen = o.w_gen;
        spec.w_rule = o.w_rule;
        spec.seed = o.seed;
        spec.w_packed_file = o.w_packed_file;
        spec.w_scales_file = o.w_scales_file;
        auto data = CaseData::Build(spec);
        if (!data.ok()) {
          row.status = data.status();
        } else {
          const TileConfig config = row.config;
          const int threads = o.check.threads;
          auto res = CheckKernel(*data, [&](const CaseData& d, uint16_t* y) {
            cpu::CpuGemmArgs a{d.spec.shape, d.spec.activations, d.x_bf16.data(), d.xs, d.w, y, d.ys, threads};
            return cpu::RunA16WFP4(a, config);
          }, o.check);
          if (res.ok()) row.result = *res;
          else row.status = res.status();
        }
      }
      if (on_row) on_row(row);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::string FormatSweepHeader() {
  return absl::StrFormat("%-6s %4s %6s %4s %4s %-11s %-26s %-18s %9s %9s %9s %8s %9s", "op", "B", "M", "N", "K",
                         "layout", "config", "verdict", "max_abs", "rel_fro", "kern_ms", "GFLOP/s", "ref_ms");
}

std::string FormatSweepRow(const SweepRow& r) {
  const std::string head = absl::StrFormat("%-6s %4d %6d %4d %4d %-11s %-26s", r.shape.op, r.shape.B, r.M, r.shape.N,
                                           r.shape.K, OutputLayoutName(r.shape.layout), r.config.ToString());
  if (!r.status.ok()) return absl::StrCat(head, " error: ", r.status.message());
  const auto& a = r.result.accuracy;
  const double flops = 2.0 * r.shape.B * r.M * r.shape.N * r.shape.K;
  std::string line = absl::StrFormat("%s %-18s %9.2e %9.2e %9.3f %8.1f %9.3f", head, reference::VerdictName(a.verdict),
                                     a.max_abs_err, a.rel_fro_err, 1e3 * r.result.kernel_seconds,
                                     flops / r.result.kernel_seconds * 1e-9, 1e3 * r.result.reference_seconds);
  if (a.verdict != reference::Verdict::kPass) absl::StrAppend(&line, "\n     ", a.reason);
  return line;
}

nlohmann::json SweepToJson(const SweepOptions& o, const std::vector<SweepRow>& rows) {
  nlohmann::json out;
  out["activations"] = ActivationModeName(o.activations);
  out["x_generator"] = o.x_gen.ToString();
  out["w_generator"] = o.w_packed_file ? "file" : o.w_gen.ToString();
  out["w_scale_rule"] = mxfp4::ScaleRuleName(o.w_rule);
  out["seed"] = o.seed;
  out["tolerance"] = {{"atol", o.check.tolerance.atol}, {"rtol", o.check.tolerance.rtol}};
  int passed = 0;
  nlohmann::json cases = nlohmann::json::array();
  for (const SweepRow& r : rows) {
    nlohmann::json c = {{"op", r.shape.op},          {"B", r.shape.B},
                        {"M", r.M},                  {"N", r.shape.N},
                        {"K", r.shape.K},            {"layout", OutputLayoutName(r.shape.layout)},
                        {"strided_x", r.shape.strided_x}, {"dispatch_entry", r.entry},
                        {"config", r.config.ToJson()}};
    if (!r.status.ok()) {
      c["verdict"] = "error";
      c["error"] = std::string(r.status.message());
    } else {
      const auto& a = r.result.accuracy;
      c["verdict"] = reference::VerdictName(a.verdict);
      c["reason"] = a.reason;
      c["max_abs_err"] = a.max_abs_err;
      c["max_rel_err"] = a.max_rel_err;
      c["rel_fro_err"] = a.rel_fro_err;
      c["cosine"] = a.cosine;
      c["nan_count"] = a.nan_count;
      c["inf_count"] = a.inf_count;
      c["unwritten_count"] = a.unwritten_count;
      c["mismatch_fraction"] = a.mismatch_fraction;
      c["accumulation_allowed"] = a.accumulation_allowed;
      c["rows_checked"] = r.result.rows_checked;
      c["kernel_seconds"] = r.result.kernel_seconds;
      c["reference_seconds"] = r.result.reference_seconds;
      c["gflops"] = 2.0 * r.shape.B * r.M * r.shape.N * r.shape.K / r.result.kernel_seconds * 1e-9;
      nlohmann::json mm = nlohmann::json::array();
      for (const auto& e : a.first_mismatches) mm.push_back({{"b", e.b}, {"m", e.m}, {"n", e.n}, {"got", e.got}, {"want", e.want}});
      c["first_mismatches"] = mm;
    }
    passed += r.passed();
    cases.push_back(std::move(c));
  }
  out["cases"] = std::move(cases);
  out["passed"] = passed;
  out["failed"] = static_cast<int>(rows.size()) - passed;
  return out;
}

}  // namespace mxval
