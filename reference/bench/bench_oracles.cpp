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
#include <random>
#include <string>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/core/prefault.h"
#include "reference/core/simd_isa.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/gated_delta/gated_delta_backward.h"
#include "reference/mamba3/mamba3.h"
#include "reference/ssd/ssd.h"
#include "reference/ssd/ssd_backward.h"

namespace {

namespace att = assay::attention;
namespace ssd = assay::ssd;
namespace gd = assay::gated_delta;
namespace m3 = assay::mamba3;
using Vec = std::vector<double>;

// ---------------------------------------------------------------------------------------------
// Inputs

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  Vec normal(int64_t n, double mean = 0, double sd = 1) {
    std::normal_distribution<double> d(mean, sd);
    Vec v(static_cast<size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
  }
  Vec uniform(int64_t n, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    Vec v(static_cast<size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
  }
};

struct AttnShape { int64_t B, H, S, D; };
struct SsdShape { int64_t B, T, H, P, N, G, Q; };
struct GdShape { int64_t B, T, H, K, V, Q; };
struct M3Shape { int64_t B, T, H, G, N, P, S, Q; };

std::string label(const AttnShape& s) {
  return "B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) + " S=" + std::to_string(s.S) +
         " D=" + std::to_string(s.D);
}
std::string label(const SsdShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " P=" + std::to_string(s.P) + " N=" + std::to_string(s.N) + " G=" + std::to_string(s.G) +
         " Q=" + std::to_string(s.Q);
}
std::string label(const GdShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " K=" + std::to_string(s.K) + " V=" + std::to_string(s.V) + " Q=" + std::to_string(s.Q);
}
std::string label(const M3Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " G=" + std::to_string(s.G) + " N=" + std::to_string(s.N) + " P=" + std::to_string(s.P) +
         " S=" + std::to_string(s.S) + " Q=" + std::to_string(s.Q);
}

// Attention: dense, non-causal, Hq = Hkv, q/k/v normal (fixtures/attention.cpp).
struct AttnCase {
  att::Params p;
  Vec q, k, v, sink, dout;
};
AttnCase make_attn(const AttnShape& s, uint64_t seed = 1) {
  AttnCase c;
  c.p.B = s.B, c.p.Sq = c.p.Sk = s.S, c.p.Hq = c.p.Hkv = s.H, c.p.D = c.p.Dv = s.D;
  Rng r(seed);
  const int64_t n = s.B * s.S * s.H * s.D;
  c.q = r.normal(n), c.k = r.normal(n), c.v = r.normal(n), c.dout = r.normal(n);
  return c;
}

// SSD (fixtures/ssd.cpp): x, B, C, z normal; dt normal (raw, softplus(dt + dt_bias) in the
// oracle); A uniform [-1, -0.05]; dt_bias uniform [-3, -1]; D [H] normal. No bounds
// (compute_bounds = false): the forms' own work, as the torch references do.
struct SsdCase {
  ssd::Params p;
  ssd::Inputs in;
  Vec dout;
};
SsdCase make_ssd(const SsdShape& s, uint64_t seed = 2) {
  SsdCase c;
  c.p.chunk_size = s.Q, c.p.dt_softplus = true, c.p.compute_bounds = false;
  auto& in = c.in;
  in.batch = s.B, in.seqlen = s.T, in.nheads = s.H, in.headdim = s.P, in.ngroups = s.G, in.dstate = s.N;
  Rng r(seed);
  const int64_t nx = s.B * s.T * s.H * s.P, nbc = s.B * s.T * s.G * s.N;
  in.x = r.normal(nx), in.dt = r.normal(s.B * s.T * s.H), in.A = r.uniform(s.H, -1.0, -0.05);
  in.B = r.normal(nbc), in.C = r.normal(nbc), in.D = r.normal(s.H), in.z = r.normal(nx);
  in.dt_bias = r.uniform(s.H, -3.0, -1.0);
  c.dout = r.normal(nx);
  return c;
}

// Gated delta (fixtures/gated_delta.cpp): q, k, v normal with qk_l2norm (fla's
// use_qk_l2norm_in_kernel; unnormalised K = 128 keys make the delta rule diverge), log gate
// uniform [-1, 0], beta uniform [0, 1], H = HV, no initial state.
struct GdCase {
  gd::Params p;
  gd::Inputs in;
  Vec d_o;
};
GdCase make_gd(const GdShape& s, uint64_t seed = 3) {
  GdCase c;
  c.p.B = s.B, c.p.T = s.T, c.p.H = c.p.HV = s.H, c.p.K = s.K, c.p.V = s.V, c.p.chunk_size = s.Q;
  c.p.gate = gd::GateMode::log, c.p.beta = gd::BetaMode::given, c.p.qk_l2norm = true;
  Rng r(seed);
  const int64_t nqk = s.B * s.T * s.H * s.K, nv = s.B * s.T * s.H * s.V, ng = s.B * s.T * s.H;
  c.in.q = r.normal(nqk), c.in.k = r.normal(nqk), c.in.v = r.normal(nv);
  c.in.g = r.uniform(ng, -1.0, 0.0), c.in.beta = r.uniform(ng, 0.0, 1.0);
  c.d_o = r.normal(nv);
  return c;
}

// Mamba-3 SISO (fixtures/mamba3.cpp): Q, K, V, Trap, Angles, Z normal; DT uniform [0.005, 0.5];
// ADT = -DT * uniform [0.05, 1.5]; Q/K biases normal(1, 0.5); D normal; no input states.
struct M3Case {
  m3::SisoParams p;
  m3::SisoInputs in;
};
M3Case make_m3(const M3Shape& s, uint64_t seed = 4) {
  M3Case c;
  c.p.B = s.B, c.p.T = s.T, c.p.H = s.H, c.p.G = s.G, c.p.N = s.N, c.p.P = s.P, c.p.S = s.S;
  c.p.chunk_size = s.Q;
  Rng r(seed);
  const int64_t nqk = s.B * s.T * s.G * s.N, nv = s.B * s.T * s.H * s.P, bht = s.B * s.H * s.T;
  c.in.q = r.normal(nqk), c.in.k = r.normal(nqk), c.in.v = r.normal(nv);
  c.in.dt = r.uniform(bht, 0.005, 0.5);
  const Vec rate = r.uniform(bht, 0.05, 1.5);
  c.in.adt.resize(static_cast<size_t>(bht));
  for (size_t i = 0; i < rate.size(); ++i) c.in.adt[i] = -(c.in.dt[i] * rate[i]);
  c.in.trap = r.normal(bht);
  c.in.q_bias = r.normal(s.H * s.N, 1.0, 0.5), c.in.k_bias = r.normal(s.H * s.N, 1.0, 0.5);
  c.in.angles = r.normal(s.B * s.T * s.H * s.S);
  c.in.d = r.normal(s.H), c.in.z = r.normal(nv);
  return c;
}

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
__attribute__((target("avx512f"))) double fma_chains_avx512(int64_t iters) {
  __m512d acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_pd(1.0 + j * 1e-3);
  const __m512d m = _mm512_set1_pd(0.999999999), a = _mm512_set1_pd(1e-9);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_pd(acc[j], m, a);
  __m512d s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_pd(s, acc[j]);
  benchmark::DoNotOptimize(s);
  return 2.0 * 8 * kChains * static_cast<double>(iters);
}
__attribute__((target("avx2,fma"))) double fma_chains_avx2(int64_t iters) {
  __m256d acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_pd(1.0 + j * 1e-3);
  const __m256d m = _mm256_set1_pd(0.999999999), a = _mm256_set1_pd(1e-9);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_pd(acc[j], m, a);
  __m256d s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_pd(s, acc[j]);
  benchmark::DoNotOptimize(s);
  return 2.0 * 4 * kChains * static_cast<double>(iters);
}
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

void BM_attention_fwd_definitional(benchmark::State& st, AttnShape s, bool quick) {
  const auto c = make_attn(s);
  st.SetLabel(label(s));
  run_timed(st, flops_attn_fwd(s), [&] { keep(att::forward_definitional(c.p, c.q, c.k, c.v, c.sink)); }, quick);
}
void BM_attention_fwd_online(benchmark::State& st, AttnShape s, bool quick) {
  const auto c = make_attn(s);
  st.SetLabel(label(s));
  run_timed(st, flops_attn_fwd(s), [&] { keep(att::forward_online(c.p, c.q, c.k, c.v, c.sink)); }, quick);
}
void BM_attention_bwd_definitional(benchmark::State& st, AttnShape s, bool quick) {
  const auto c = make_attn(s);
  st.SetLabel(label(s));
  run_timed(st, flops_attn_bwd(s),
            [&] { keep(att::backward_definitional(c.p, c.q, c.k, c.v, c.sink, c.dout, {})); }, quick);
}
void BM_attention_bwd_tiled(benchmark::State& st, AttnShape s, bool quick) {
  const auto c = make_attn(s);
  const auto f = att::forward_online(c.p, c.q, c.k, c.v, c.sink);  // o, lse (untimed)
  st.SetLabel(label(s));
  run_timed(st, flops_attn_bwd(s),
            [&] { keep(att::backward_tiled(c.p, c.q, c.k, c.v, c.sink, f.o, f.lse, c.dout, {})); }, quick);
}

void BM_ssd_recurrence(benchmark::State& st, SsdShape s, bool quick) {
  const auto c = make_ssd(s);
  st.SetLabel(label(s));
  run_timed(st, flops_ssd_recurrence(s), [&] { keep(ssd::recurrence(c.p, c.in)); }, quick);
}
void BM_ssd_chunked(benchmark::State& st, SsdShape s, bool quick) {
  const auto c = make_ssd(s);
  st.SetLabel(label(s));
  run_timed(st, flops_ssd_chunked(s), [&] { keep(ssd::chunked(c.p, c.in)); }, quick);
}
void BM_ssd_bwd_recurrent(benchmark::State& st, SsdShape s, bool quick) {
  const auto c = make_ssd(s);
  st.SetLabel(label(s));
  run_timed(st, flops_ssd_bwd_recurrent(s), [&] { keep(ssd::backward_recurrent(c.p, c.in, c.dout)); }, quick);
}
void BM_ssd_bwd_chunked(benchmark::State& st, SsdShape s, bool quick) {
  const auto c = make_ssd(s);
  st.SetLabel(label(s));
  run_timed(st, flops_ssd_bwd_chunked(s), [&] { keep(ssd::backward_chunked(c.p, c.in, c.dout)); }, quick);
}

void BM_gated_delta_recurrent(benchmark::State& st, GdShape s, bool quick) {
  const auto c = make_gd(s);
  st.SetLabel(label(s));
  run_timed(st, flops_gd_recurrent(s), [&] { keep(gd::recurrent(c.p, c.in)); }, quick);
}
void BM_gated_delta_chunked(benchmark::State& st, GdShape s, bool quick) {
  const auto c = make_gd(s);
  st.SetLabel(label(s));
  run_timed(st, flops_gd_chunked(s), [&] { keep(gd::chunked(c.p, c.in)); }, quick);
}
void BM_gated_delta_bwd_recurrent(benchmark::State& st, GdShape s, bool quick) {
  const auto c = make_gd(s);
  st.SetLabel(label(s));
  run_timed(st, flops_gd_bwd_recurrent(s), [&] { keep(gd::backward_recurrent(c.p, c.in, c.d_o)); }, quick);
}
void BM_gated_delta_bwd_chunked(benchmark::State& st, GdShape s, bool quick) {
  const auto c = make_gd(s);
  st.SetLabel(label(s));
  run_timed(st, flops_gd_bwd_chunked(s), [&] { keep(gd::backward_chunked(c.p, c.in, c.d_o)); }, quick);
}

void BM_mamba3_siso_step(benchmark::State& st, M3Shape s, bool quick) {
  const auto c = make_m3(s);
  st.SetLabel(label(s));
  run_timed(st, flops_m3_step(s), [&] { keep(m3::siso_step(c.p, c.in)); }, quick);
}
void BM_mamba3_siso_chunked(benchmark::State& st, M3Shape s, bool quick) {
  const auto c = make_m3(s);
  st.SetLabel(label(s));
  run_timed(st, flops_m3_chunked(s), [&] { keep(m3::siso_chunked(c.p, c.in)); }, quick);
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
    const auto reg = [&](const char* name, auto fn, auto shape) {
      benchmark::RegisterBenchmark((name + sfx).c_str(), fn, shape, quick)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(min_time);
    };
    benchmark::RegisterBenchmark(("BM_dgemm" + sfx).c_str(), BM_dgemm, s.dgemm_n)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(min_time);
    using Ceiling = void (*)(benchmark::State&, bool);
    for (const auto& [name, fn] : {std::pair<const char*, Ceiling>{"BM_fma_peak", BM_fma_peak},
                                   std::pair<const char*, Ceiling>{"BM_triad", BM_triad}})
      benchmark::RegisterBenchmark((std::string(name) + sfx).c_str(), fn, quick)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(min_time);
    reg("BM_attention_fwd_definitional", BM_attention_fwd_definitional, s.attn_fwd);
    reg("BM_attention_fwd_online", BM_attention_fwd_online, s.attn_fwd);
    reg("BM_attention_bwd_definitional", BM_attention_bwd_definitional, s.attn_bwd);
    reg("BM_attention_bwd_tiled", BM_attention_bwd_tiled, s.attn_bwd);
    reg("BM_ssd_recurrence", BM_ssd_recurrence, s.ssd_fwd);
    reg("BM_ssd_chunked", BM_ssd_chunked, s.ssd_fwd);
    reg("BM_ssd_bwd_recurrent", BM_ssd_bwd_recurrent, s.ssd_bwd);
    reg("BM_ssd_bwd_chunked", BM_ssd_bwd_chunked, s.ssd_bwd);
    reg("BM_gated_delta_recurrent", BM_gated_delta_recurrent, s.gd_fwd);
    reg("BM_gated_delta_chunked", BM_gated_delta_chunked, s.gd_fwd);
    reg("BM_gated_delta_bwd_recurrent", BM_gated_delta_bwd_recurrent, s.gd_bwd);
    reg("BM_gated_delta_bwd_chunked", BM_gated_delta_bwd_chunked, s.gd_bwd);
    reg("BM_mamba3_siso_step", BM_mamba3_siso_step, s.m3);
    reg("BM_mamba3_siso_chunked", BM_mamba3_siso_chunked, s.m3);
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
    const auto c = make_attn(s, 11);
    const auto r = att::forward_definitional(c.p, c.q, c.k, c.v, c.sink);
    j["attention"] = {{"shape", {{"B", s.B}, {"H", s.H}, {"S", s.S}, {"D", s.D}}},
                      {"inputs", {{"q", c.q}, {"k", c.k}, {"v", c.v}}},
                      {"outputs", {{"o", r.o}, {"lse", r.lse}}}};
  }
  {
    const SsdShape s{1, 100, 2, 8, 16, 1, 16};
    const auto c = make_ssd(s, 12);
    const auto r = ssd::recurrence(c.p, c.in);
    j["ssd"] = {{"shape", {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"P", s.P}, {"N", s.N}, {"G", s.G}, {"Q", s.Q}}},
                {"inputs",
                 {{"x", c.in.x}, {"dt", c.in.dt}, {"A", c.in.A}, {"B", c.in.B}, {"C", c.in.C},
                  {"D", c.in.D}, {"z", c.in.z}, {"dt_bias", c.in.dt_bias}}},
                {"outputs", {{"out", r.out}, {"final_states", r.final_states}}}};
  }
  {
    const GdShape s{1, 100, 2, 16, 16, 16};
    const auto c = make_gd(s, 13);
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
