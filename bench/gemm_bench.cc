// CPU A16WFP4 benchmarks, side by side in one run:
//   Reference   reference::ReferenceGemm (FP32, full rows)
//   CpuKernel   cpu::RunA16WFP4 with the shipped dispatch table's config
//   OpenBlas    the obvious peer: dequantize W once (threaded) + one
//               cblas_sgemm per batch on the bf16-rounded activations,
//               with the same strides and output layout; batches run in
//               parallel, each sgemm single-threaded
//   FmaPeak     the machine's measured AVX2 FMA peak (independent chains on
//               every thread), the ceiling for all of the above
// Shapes: glm5-tp4 and dsv3-tp8 (kup, vup) at M = 1, 64, 1024, 8192.
// Counters: GFLOP/s (rate of the GEMM's 2*B*M*N*K flops).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>

#include <atomic>
#include <map>
#include <chrono>
#include <thread>
#include <vector>

#include "client/sweep.h"
#include "common/parallel.h"
#include "kernels/cpu/a16wfp4_cpu.h"
#include "kernels/dispatch/config_table.h"
#include "reference/reference_gemm.h"
#include "validation/presets.h"
#include "validation/validation_case.h"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

namespace mxval {
namespace {

struct Problem {
  OpShape op;
  CaseData data;
};

// Benchmarks are registered grouped by (shape, M), so keeping only the
// current problem alive lets the three implementations run back to back on
// the same buffers without holding every case in memory.
const Problem& GetProblem(const std::string& preset, int op_index, int64_t M) {
  static auto* cache = new std::map<std::string, Problem>();
  const std::string key = preset + "/" + std::to_string(op_index) + "/" + std::to_string(M);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  cache->clear();
  const OpShape op = (*ShapePreset(preset))[op_index];
  CaseSpec spec = SpecForShape(op, M);
  spec.guard_rows = 0;
  auto d = CaseData::Build(spec);
  return cache->emplace(key, Problem{op, std::move(*d)}).first->second;
}

const ConfigTable& Table() {
  static const ConfigTable* t = new ConfigTable(*ConfigTable::FromJsonText(DefaultCpuTableJson()));
  return *t;
}

void SetFlops(benchmark::State& state, const GemmShape& s) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(s.Flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Reference(benchmark::State& state, std::string preset, int op) {
  const Problem& p = GetProblem(preset, op, state.range(0));
  const GemmShape& s = p.data.spec.shape;
  std::vector<float> y(p.data.y_elems);
  for (auto _ : state) {
    auto st = reference::ReferenceGemm(s, p.data.x_f32.data(), p.data.xs, p.data.w, y.data(), p.data.ys, {});
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
    benchmark::DoNotOptimize(y.data());
  }
  SetFlops(state, s);
}

void BM_CpuKernel(benchmark::State& state, std::string preset, int op) {
  const Problem& p = GetProblem(preset, op, state.range(0));
  const GemmShape& s = p.data.spec.shape;
  auto e = Table().Lookup(p.op.op, s.M, s.N, s.K);
  std::vector<uint16_t> y(p.data.y_elems);
  cpu::CpuGemmArgs a{s, ActivationMode::kBf16, p.data.x_bf16.data(), p.data.xs, p.data.w, y.data(), p.data.ys, 0};
  for (auto _ : state) {
    auto st = cpu::RunA16WFP4(a, e->config);
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(e->config.ToString());
  SetFlops(state, s);
}

void BM_OpenBlas(benchmark::State& state, std::string preset, int op) {
  const Problem& p = GetProblem(preset, op, state.range(0));
  const GemmShape& s = p.data.spec.shape;
  const CaseData& d = p.data;
  // Activations as the kernel sees them (bf16 values), same strided layout.
  std::vector<float> x(d.x_bf16.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = mxfp4::Bf16BitsToFloat(d.x_bf16[i]);
  std::vector<float> w(s.B * s.N * s.K), y(d.y_elems);
  // One single-threaded sgemm per batch, batches spread over the cores: no
  // OpenBLAS thread pool left spinning into the next benchmark on this
  // 2-core machine (which slowed whatever ran next), and no per-call pool
  // start-up at small M.
  openblas_set_num_threads(1);
  for (auto _ : state) {
    // Dequantize once per call (threaded over batch x row blocks).
    ParallelFor(s.B * 8, 0, [&](int64_t i, int) {
      const int64_t b = i / 8, n0 = (i % 8) * s.N / 8, n1 = (i % 8 + 1) * s.N / 8;
      for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* pr = d.w.packed + b * d.w.packed_stride_b + n * d.w.packed_stride_n;
        const uint8_t* sr = d.w.scales + b * d.w.scale_stride_b + n * d.w.scale_stride_n;
        float* wr = w.data() + (b * s.N + n) * s.K;
        for (int64_t k = 0; k < s.K; k += 2) {
          const float sc = mxfp4::DecodeE8M0(sr[k / 32]);
          wr[k] = mxfp4::DecodeE2M1(pr[k / 2] & 15) * sc;
          wr[k + 1] = mxfp4::DecodeE2M1(pr[k / 2] >> 4) * sc;
        }
      }
    });
    ParallelFor(s.B, 0, [&](int64_t b, int) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.M, s.N, s.K, 1.0f, x.data() + b * d.xs.b, d.xs.m,
                  w.data() + b * s.N * s.K, s.K, 0.0f, y.data() + b * d.ys.b, d.ys.m);
    });
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(openblas_get_corename());
  SetFlops(state, s);
}

// Ten independent FMA chains (> latency x ports) in named registers.
__attribute__((target("avx2,fma"))) double FmaChains(int64_t iters) {
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(1), a1 = _mm256_set1_ps(2), a2 = _mm256_set1_ps(3), a3 = _mm256_set1_ps(4),
         a4 = _mm256_set1_ps(5), a5 = _mm256_set1_ps(6), a6 = _mm256_set1_ps(7), a7 = _mm256_set1_ps(8),
         a8 = _mm256_set1_ps(9), a9 = _mm256_set1_ps(10);
  for (int64_t it = 0; it < iters; ++it) {
    a0 = _mm256_fmadd_ps(a0, m, c); a1 = _mm256_fmadd_ps(a1, m, c); a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c); a4 = _mm256_fmadd_ps(a4, m, c); a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c); a7 = _mm256_fmadd_ps(a7, m, c); a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(a8, a9));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

void BM_FmaPeak(benchmark::State& state) {
  const int threads = DefaultThreadCount();
  const int64_t iters = 20'000'000;
  for (auto _ : state) {
    std::vector<std::thread> pool;
    std::atomic<double> sink{0};
    for (int t = 0; t < threads; ++t) pool.emplace_back([&] { sink = sink + FmaChains(iters); });
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(sink.load());
  }
  // 10 chains x 8 lanes x 2 flops per iteration per thread.
  state.counters["GFLOP/s"] =
      benchmark::Counter(threads * iters * 10.0 * 8 * 2 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(threads));
}

void Register() {
  benchmark::RegisterBenchmark("FmaPeak", BM_FmaPeak)->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const char* preset : {"glm5-tp4", "dsv3-tp8"}) {
    for (int op = 0; op < 2; ++op) {
      const std::string name = std::string(preset) + "/" + (op == 0 ? "kup" : "vup");
      using Fn = void (*)(benchmark::State&, std::string, int);
      const std::pair<const char*, Fn> fns[] = {{"CpuKernel", BM_CpuKernel}, {"OpenBlas", BM_OpenBlas},
                                                {"Reference", BM_Reference}};
      for (int64_t M : {1, 64, 1024, 8192}) {
        for (auto [label, fn] : fns) {
          benchmark::RegisterBenchmark((std::string(label) + "/" + name).c_str(), fn, std::string(preset), op)
              ->ArgName("M")
              ->Arg(M)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
        }
      }
    }
  }
}

}  // namespace
}  // namespace mxval

int main(int argc, char** argv) {
  mxval::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
