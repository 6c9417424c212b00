// bench_oracles: Google Benchmark timings of the fp64 oracle forms (build/bin/bench_oracles).
//
// Every benchmark exists twice: NAME/full at the shapes of the issue "oracles faster than PyTorch's
// fp64 references at every thread count", and NAME/quick at small shapes for a smoke run:
//   bench_oracles --benchmark_filter=quick        (seconds)
//   bench_oracles --benchmark_filter=full         (a few minutes at 1 thread)
// OMP_NUM_THREADS selects the threads (the oracles' OpenMP loops and OpenBLAS under Eigen alike);
// it is printed in the context. The shape of each run is its label ("B=1 H=8 S=4096 D=128"),
// which scripts/bench_oracles_vs_torch.py reads to run its torch references at the same shapes.
//
// Counters: GFLOP/s from a FLOP model per form (written next to each benchmark; one model per
// form, so two forms of the same math have different counts when their algorithms do different
// work), and of_dgemm = GFLOP/s / the dgemm GFLOP/s of this process at the same thread count.
// BM_dgemm runs first and stores its rate; when a filter leaves it out, the rate is measured once
// (untimed) before the first benchmark that needs it. Every form is called once, untimed, before
// its timed loop. Inputs are random with the fixtures' distributions (fixtures/<op>.cpp), so the
// oracles take their real code paths; they are made before the timed loop.
//
// Machine ceilings (no oracle; they say what a thread count can give on this machine at all):
// BM_fma_peak, every thread running independent fp64 FMA chains in registers (no memory traffic:
// the compute ceiling, so its 1 -> N scaling is the most any compute-bound form can scale, SMT
// siblings and all-core clocks included), and BM_triad, a[i] = b[i] + s c[i] over 3 x 128 MiB
// (the memory ceiling, GB/s).
//
// Cross-check mode (for the torch script): bench_oracles --assay_crosscheck=FILE writes tiny
// cases (inputs and the oracles' outputs, JSON) to FILE and exits without benchmarking.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <Eigen/Dense>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <utility>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/bench/bench_cases.h"
#include "reference/core/prefault.h"
#include "reference/core/simd_isa.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/gated_delta/gated_delta_backward.h"
#include "reference/mamba3/mamba3.h"
#include "reference/ssd/ssd.h"
#include "reference/ssd/ssd_backward.h"

namespace {

using namespace assay_bench;

// ---------------------------------------------------------------------------------------------
// FLOP models (double: the counts pass 2^31 easily). Q = chunk, per (batch, head); a multiply-add
// counts 2.

// dgemm n^3: 2 n^3.
double flops_dgemm(int64_t n) { return 2.0 * n * n * n; }
// Attention forward, both forms: QK^T and PV, 4 B H S^2 D (softmax not counted; FA's convention).
double flops_attn_fwd(const AttnShape& s) { return 4.0 * s.B * s.H * s.S * s.S * s.D; }
// Attention backward, both forms: 10 B H S^2 D (recompute S, dV, dP, dQ, dK; FA's 2.5x forward).
double flops_attn_bwd(const AttnShape& s) { return 10.0 * s.B * s.H * s.S * s.S * s.D; }
// SSD recurrence, per token and head: S = e S + (dt x) (x) B (3 P N) and y = S C (2 P N).
double flops_ssd_recurrence(const SsdShape& s) { return 5.0 * s.B * s.T * s.H * s.P * s.N; }
// SSD chunked, per chunk and head, the multiply-adds of the dual form as GEMMs:
//   CB = C B^T (Q^2 N), Y_diag = (L o CB) X (Q^2 P), chunk state X^T (decay dt B) (Q P N),
//   Y_off = C S_start (Q P N)  ->  2 (Q^2 (N + P) + 2 Q P N) per chunk, i.e. per token / Q.
double flops_ssd_chunked(const SsdShape& s) {
  return 2.0 * s.B * s.T * s.H * (s.Q * (s.N + s.P) + 2.0 * s.P * s.N);
}
// SSD backward, recurrent: per token and head the forward recompute (3 P N) plus dS += dy (x) C,
// dC = S^T dy, dx = dt dS B, dB = dS^T x (2 P N each), <dS, x (x) B> (3 P N), <dS, S_prev> (2 P N),
// dS_prev = e dS (P N): 17 P N.
double flops_ssd_bwd_recurrent(const SsdShape& s) { return 17.0 * s.B * s.T * s.H * s.P * s.N; }
// SSD backward, chunked: the forward dual form recomputed plus twice its GEMM work for the
// adjoints (dCB, dX, dC, dB, dstates): 3x flops_ssd_chunked.
double flops_ssd_bwd_chunked(const SsdShape& s) { return 3.0 * flops_ssd_chunked(s); }
// Gated delta recurrent, per token and head: S = e^g S (K V), m = S^T k (2 K V),
// S += k delta^T (2 K V), o = S^T q (2 K V): 7 K V.
double flops_gd_recurrent(const GdShape& s) { return 7.0 * s.B * s.T * s.H * s.K * s.V; }
// Gated delta chunked (WY/UT), per chunk and head, as GEMMs:
//   A = beta K K^T o E (Q^2 K), T = (I + A)^-1 by substitution (Q^3 / 6), u = T (beta V) (Q^2 V),
//   w = T (beta e^G K) (Q^2 K), v_new = u - w S0 (Q K V), e^G Q S0 (Q K V),
//   (Q K^T o E) (Q^2 K) v_new (Q^2 V), S_end update K^T (..) (Q K V)
//   -> 2 (Q^2 (3K + 2V) + Q^3 / 6 + 3 Q K V) per chunk, i.e. per token / Q.
double flops_gd_chunked(const GdShape& s) {
  return 2.0 * s.B * s.T * s.H * (s.Q * (3.0 * s.K + 2.0 * s.V) + s.Q * s.Q / 6.0 + 3.0 * s.K * s.V);
}
// Gated delta backward, recurrent: the forward recompute (7 K V) plus dS += scale q do^T, dq = S do,
// dk += dS delta, ddelta = dS^T k, dS' = dS + k dm^T, dk += S' dm, dg = <dS', S'> (2 K V each) and
// dS = a dS' (K V): 22 K V per token and head.
double flops_gd_bwd_recurrent(const GdShape& s) { return 22.0 * s.B * s.T * s.H * s.K * s.V; }
// Gated delta backward, chunked: forward recompute plus twice its GEMM work: 3x flops_gd_chunked.
double flops_gd_bwd_chunked(const GdShape& s) { return 3.0 * flops_gd_chunked(s); }
// Mamba-3 SISO step, per token and head: H = alpha H + beta v' k'^T + gamma v k^T
// (P N for alpha H, 2 P N per rank-1 term) and y = H q (2 P N): 7 P N (rotations O(N), not counted).
double flops_m3_step(const M3Shape& s) { return 7.0 * s.B * s.T * s.H * s.P * s.N; }
// Mamba-3 SISO chunked: the SSD dual form's GEMMs (scores Q K^T, masked scores V, chunk state,
// state to output): 2 (Q^2 (N + P) + 2 Q P N) per chunk and head (the same-step gamma term and the
// trapezoid's shifted key are O(Q (N + P)), not counted).
double flops_m3_chunked(const M3Shape& s) {
  return 2.0 * s.B * s.T * s.H * (s.Q * (s.N + s.P) + 2.0 * s.P * s.N);
}

// ---------------------------------------------------------------------------------------------
// dgemm reference rate and the timed loop

double g_dgemm_gflops = 0;  // GFLOP/s of the last BM_dgemm (or of measure_dgemm) in this process

// The dgemm rate at this process's thread count (OpenBLAS's OpenMP build and Eigen's own GEMM both
// use the OpenMP threads for a product called outside a parallel region).
#ifdef ASSAY_HAVE_OPENBLAS
extern "C" char* openblas_get_corename(void);
#endif

double dgemm_once(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b, Eigen::MatrixXd& c) {
  const auto t0 = std::chrono::steady_clock::now();
  c.noalias() = a * b;
  benchmark::DoNotOptimize(c.data());
  benchmark::ClobberMemory();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sec;
}

// Best of 3 products of n x n (after one warm-up): used only when BM_dgemm was filtered out.
double measure_dgemm(int64_t n) {
  const Eigen::MatrixXd a = Eigen::MatrixXd::Random(n, n), b = Eigen::MatrixXd::Random(n, n);
  Eigen::MatrixXd c(n, n);
  dgemm_once(a, b, c);
  double best = 1e300;
  for (int i = 0; i < 3; ++i) best = std::min(best, dgemm_once(a, b, c));
  return flops_dgemm(n) / best * 1e-9;
}

// Times fn over the benchmark loop (wall clock, as UseRealTime) and sets GFLOP/s and of_dgemm.
void run_timed(benchmark::State& st, double flops, const std::function<void()>& fn, bool quick) {
  if (g_dgemm_gflops <= 0) g_dgemm_gflops = measure_dgemm(quick ? 1024 : 2048);
  // One untimed call first, as the torch script warms up its references: the slow forms run the
  // timed loop once, and a cold first call (the allocator's first mappings of hundreds of MB, page
  // compaction for huge pages) would otherwise be all that is measured.
  fn();
  double sec = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sec += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double gflops = flops * static_cast<double>(st.iterations()) / sec * 1e-9;
  st.counters["GFLOP/s"] = gflops;
  st.counters["of_dgemm"] = gflops / g_dgemm_gflops;
}

template <class T>
void keep(const T& r) {
  benchmark::DoNotOptimize(&r);
}

// ---------------------------------------------------------------------------------------------
// Benchmarks

void BM_dgemm(benchmark::State& st, int64_t n) {
  const Eigen::MatrixXd a = Eigen::MatrixXd::Random(n, n), b = Eigen::MatrixXd::Random(n, n);
  Eigen::MatrixXd c(n, n);
  dgemm_once(a, b, c);  // warm-up (OpenBLAS buffers, OpenMP pool)
  double sec = 0;
  for (auto _ : st) sec += dgemm_once(a, b, c);
  g_dgemm_gflops = flops_dgemm(n) * static_cast<double>(st.iterations()) / sec * 1e-9;
  st.counters["GFLOP/s"] = g_dgemm_gflops;
  st.counters["of_dgemm"] = 1.0;
  st.SetLabel("N=" + std::to_string(n));
}

// ---------------------------------------------------------------------------------------------
// Machine ceilings

// kChains independent accumulators per thread (FMA latency 4 cycles x 2 ports = 8 in flight), kept
// in registers (the unrolled loops; a loop over j would keep them on the stack):
// acc = acc * m + a in registers, iters times. Returns the FLOPs done (2 per lane and FMA).
constexpr int kChains = 16;
#ifdef ASSAY_SIMD_X86
// One body per x86 vector width: W lanes of type VD, the intrinsics of prefix P, compiled for TARGET.
#define ASSAY_FMA_CHAINS(NAME, TARGET, VD, P, W)                                          \
  __attribute__((target(TARGET))) double NAME(int64_t iters) {                             \
    VD acc[kChains];                                                                        \
    for (int j = 0; j < kChains; ++j) acc[j] = P##_set1_pd(1.0 + j * 1e-3);                \
    const VD m = P##_set1_pd(0.999999999), a = P##_set1_pd(1e-9);                          \
    for (int64_t i = 0; i < iters; ++i)                                                     \
      _Pragma("GCC unroll 16") for (int j = 0; j < kChains; ++j) acc[j] = P##_fmadd_pd(acc[j], m, a); \
    VD s = acc[0];                                                                          \
    for (int j = 1; j < kChains; ++j) s = P##_add_pd(s, acc[j]);                            \
    benchmark::DoNotOptimize(s);                                                            \
    return 2.0 * W * kChains * static_cast<double>(iters);                                  \
  }
ASSAY_FMA_CHAINS(fma_chains_avx512, "avx512f", __m512d, _mm512, 8)
ASSAY_FMA_CHAINS(fma_chains_avx2, "avx2,fma", __m256d, _mm256, 4)
#undef ASSAY_FMA_CHAINS
#endif
double fma_chains(int64_t iters) {
#ifdef ASSAY_SIMD_X86
  switch (assay::simd_isa_pick(assay::SimdIsa::best)) {
    case assay::SimdIsa::avx512: return fma_chains_avx512(iters);
    case assay::SimdIsa::avx2: return fma_chains_avx2(iters);
    default: break;
  }
#endif
  double acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = 1.0 + j * 1e-3;
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = std::fma(acc[j], 0.999999999, 1e-9);
  benchmark::DoNotOptimize(acc);
  return 2.0 * kChains * static_cast<double>(iters);
}

// The same chains on every OpenMP thread at once; GFLOP/s of all threads together.
void BM_fma_peak(benchmark::State& st, bool quick) {
  const int64_t iters = quick ? 1 << 18 : 1 << 22;
  double sec = 0, flops = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    double f = 0;
#pragma omp parallel reduction(+ : f)
    f += fma_chains(iters);
    sec += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    flops += f;
  }
  st.counters["GFLOP/s"] = flops / sec * 1e-9;
  st.SetLabel("threads=" + std::to_string(omp_get_max_threads()));
}

// a = b + s c over 3 arrays of 16 Mi doubles (first touched in parallel, with the same static
// schedule as the timed loop); GB/s counts 24 bytes per element (two reads, one write).
void BM_triad(benchmark::State& st, bool quick) {
  const int64_t n = quick ? int64_t{1} << 21 : int64_t{1} << 24;
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = 0, b[i] = 1, c[i] = 2;
  double sec = 0;
  int64_t reps = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 0.5 * c[i];
    benchmark::DoNotOptimize(a.get());
    benchmark::ClobberMemory();
    sec += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++reps;
  }
  st.counters["GB/s"] = 24.0 * static_cast<double>(n) * static_cast<double>(reps) / sec * 1e-9;
  st.SetLabel("n=" + std::to_string(n));
}

// One oracle form: its case made from the shape (untimed), the shape as the label, form(case)
// timed against the form's FLOP model.
template <class Shape, class Form>
void BM_form(benchmark::State& st, Shape s, bool quick, double (*flops)(const Shape&), Form form) {
  const auto c = make_case(s);
  st.SetLabel(label(s));
  run_timed(st, flops(s), [&] { keep(form(c)); }, quick);
}

// The tiled attention backward reads the forward's o and lse: computed before the timed loop.
void BM_attention_bwd_tiled(benchmark::State& st, AttnShape s, bool quick) {
  const auto c = make_case(s);
  const auto f = att::forward_online(c.p, c.q, c.k, c.v, c.sink);  // o, lse (untimed)
  st.SetLabel(label(s));
  run_timed(st, flops_attn_bwd(s),
            [&] { keep(att::backward_tiled(c.p, c.q, c.k, c.v, c.sink, f.o, f.lse, c.dout, {})); }, quick);
}

// Shapes. full: the issue's; quick: a smoke run of a few seconds.
struct Shapes {
  int64_t dgemm_n;
  AttnShape attn_fwd, attn_bwd;
  SsdShape ssd_fwd, ssd_bwd;
  GdShape gd_fwd, gd_bwd;
  M3Shape m3;
};
constexpr Shapes kFull{2048,
                       {1, 8, 4096, 128},
                       {1, 8, 1024, 128},
                       {1, 8192, 8, 64, 128, 1, 64},
                       {1, 2048, 8, 64, 128, 1, 64},
                       {1, 8192, 8, 128, 128, 64},
                       {1, 2048, 8, 128, 128, 64},
                       {1, 8192, 8, 1, 128, 64, 32, 64}};
constexpr Shapes kQuick{1024,
                        {1, 2, 512, 64},
                        {1, 2, 256, 64},
                        {1, 1024, 2, 64, 128, 1, 64},
                        {1, 512, 2, 64, 128, 1, 64},
                        {1, 1024, 2, 128, 128, 64},
                        {1, 512, 2, 128, 128, 64},
                        {1, 1024, 2, 1, 128, 64, 32, 64}};

void register_all() {
  for (const bool quick : {false, true}) {
    const Shapes& s = quick ? kQuick : kFull;
    const std::string sfx = quick ? "/quick" : "/full";
    const double min_time = quick ? 0.1 : 0.5;
    const auto reg_fn = [&](const char* name, auto fn, auto... args) {
      benchmark::RegisterBenchmark((name + sfx).c_str(), fn, args...)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(min_time);
    };
    // A form of an op: form(case) timed at `shape`, against the FLOP model `flops`.
    const auto reg = [&](const char* name, auto shape, double (*flops)(const decltype(shape)&), auto form) {
      reg_fn(name, BM_form<decltype(shape), decltype(form)>, shape, quick, flops, form);
    };
    reg_fn("BM_dgemm", BM_dgemm, s.dgemm_n);
    reg_fn("BM_fma_peak", BM_fma_peak, quick);
    reg_fn("BM_triad", BM_triad, quick);
    reg("BM_attention_fwd_definitional", s.attn_fwd, flops_attn_fwd,
        [](const AttnCase& c) { return att::forward_definitional(c.p, c.q, c.k, c.v, c.sink); });
    reg("BM_attention_fwd_online", s.attn_fwd, flops_attn_fwd,
        [](const AttnCase& c) { return att::forward_online(c.p, c.q, c.k, c.v, c.sink); });
    reg("BM_attention_bwd_definitional", s.attn_bwd, flops_attn_bwd,
        [](const AttnCase& c) { return att::backward_definitional(c.p, c.q, c.k, c.v, c.sink, c.dout, {}); });
    reg_fn("BM_attention_bwd_tiled", BM_attention_bwd_tiled, s.attn_bwd, quick);
    reg("BM_ssd_recurrence", s.ssd_fwd, flops_ssd_recurrence, [](const SsdCase& c) { return ssd::recurrence(c.p, c.in); });
    reg("BM_ssd_chunked", s.ssd_fwd, flops_ssd_chunked, [](const SsdCase& c) { return ssd::chunked(c.p, c.in); });
    reg("BM_ssd_bwd_recurrent", s.ssd_bwd, flops_ssd_bwd_recurrent,
        [](const SsdCase& c) { return ssd::backward_recurrent(c.p, c.in, c.dout); });
    reg("BM_ssd_bwd_chunked", s.ssd_bwd, flops_ssd_bwd_chunked,
        [](const SsdCase& c) { return ssd::backward_chunked(c.p, c.in, c.dout); });
    reg("BM_gated_delta_recurrent", s.gd_fwd, flops_gd_recurrent, [](const GdCase& c) { return gd::recurrent(c.p, c.in); });
    reg("BM_gated_delta_chunked", s.gd_fwd, flops_gd_chunked, [](const GdCase& c) { return gd::chunked(c.p, c.in); });
    reg("BM_gated_delta_bwd_recurrent", s.gd_bwd, flops_gd_bwd_recurrent,
        [](const GdCase& c) { return gd::backward_recurrent(c.p, c.in, c.dout); });
    reg("BM_gated_delta_bwd_chunked", s.gd_bwd, flops_gd_bwd_chunked,
        [](const GdCase& c) { return gd::backward_chunked(c.p, c.in, c.dout); });
    reg("BM_mamba3_siso_step", s.m3, flops_m3_step, [](const M3Case& c) { return m3::siso_step(c.p, c.in); });
    reg("BM_mamba3_siso_chunked", s.m3, flops_m3_chunked, [](const M3Case& c) { return m3::siso_chunked(c.p, c.in); });
  }
}

// ---------------------------------------------------------------------------------------------
// Cross-check cases for scripts/bench_oracles_vs_torch.py: tiny inputs made as above and the
// ground-truth forms' outputs (attention definitional, SSD recurrence, gated delta recurrent).

int write_crosscheck(const std::string& path) {
  using nlohmann::json;
  json j;
  {
    const AttnShape s{1, 2, 37, 16};
    const auto c = make_case(s, 11);
    const auto r = att::forward_definitional(c.p, c.q, c.k, c.v, c.sink);
    j["attention"] = {{"shape", {{"B", s.B}, {"H", s.H}, {"S", s.S}, {"D", s.D}}},
                      {"inputs", {{"q", c.q}, {"k", c.k}, {"v", c.v}}},
                      {"outputs", {{"o", r.o}, {"lse", r.lse}}}};
  }
  {
    const SsdShape s{1, 100, 2, 8, 16, 1, 16};
    const auto c = make_case(s, 12);
    const auto r = ssd::recurrence(c.p, c.in);
    j["ssd"] = {{"shape", {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"P", s.P}, {"N", s.N}, {"G", s.G}, {"Q", s.Q}}},
                {"inputs",
                 {{"x", c.in.x}, {"dt", c.in.dt}, {"A", c.in.A}, {"B", c.in.B}, {"C", c.in.C},
                  {"D", c.in.D}, {"z", c.in.z}, {"dt_bias", c.in.dt_bias}}},
                {"outputs", {{"out", r.out}, {"final_states", r.final_states}}}};
  }
  {
    const GdShape s{1, 100, 2, 16, 16, 16};
    const auto c = make_case(s, 13);
    const auto r = gd::recurrent(c.p, c.in);
    j["gated_delta"] = {{"shape", {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"K", s.K}, {"V", s.V}, {"Q", s.Q}}},
                        {"inputs", {{"q", c.in.q}, {"k", c.in.k}, {"v", c.in.v}, {"g", c.in.g}, {"beta", c.in.beta}}},
                        {"outputs", {{"o", r.o}, {"final_state", r.final_state}}}};
  }
  std::ofstream f(path);
  f << j.dump();
  f.close();
  if (!f) {
    std::fprintf(stderr, "bench_oracles: cannot write %s\n", path.c_str());
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first (Google Benchmark would refuse it).
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    constexpr const char* kFlag = "--assay_crosscheck=";
    if (std::strncmp(argv[i], kFlag, std::strlen(kFlag)) == 0)
      return write_crosscheck(argv[i] + std::strlen(kFlag));
    args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  // As `assay` does (prefault.h): freed memory stays with the process, so each timed call's fresh
  // outputs reuse mapped pages instead of paying first-touch faults that vary 20-fold on a VM.
  const bool kept = assay::keep_freed_memory();
  register_all();
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 2;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  benchmark::AddCustomContext("OMP_NUM_THREADS", omp ? omp : "(unset)");
  benchmark::AddCustomContext("omp_max_threads", std::to_string(omp_get_max_threads()));
  benchmark::AddCustomContext("freed_memory", kept ? "kept by malloc (no mmap, no trim)" : "malloc defaults");
#ifdef ASSAY_HAVE_OPENBLAS
  // The kernel OpenBLAS picked for this CPU: a VM that hides the CPU model can get a generic one
  // (measured: dgemm 98 GFLOP/s on 16 AVX-512 cores, 476 with OPENBLAS_CORETYPE=SKYLAKEX).
  benchmark::AddCustomContext("dense_products", std::string("OpenBLAS (EIGEN_USE_BLAS), core ") +
                                                    openblas_get_corename());
#else
  benchmark::AddCustomContext("dense_products", "Eigen");
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
