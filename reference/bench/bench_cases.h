// The inputs of the oracle benchmarks (bench_oracles.cpp): one shape struct per op, its label
// ("B=1 H=8 S=4096 D=128", which scripts/bench_oracles_vs_torch.py parses), and make_case(shape),
// random inputs with the fixtures' distributions (fixtures/<op>.cpp) so that the oracles take their
// real code paths.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/mamba3/mamba3.h"
#include "reference/ssd/ssd.h"

namespace assay_bench {

namespace att = assay::attention;
namespace ssd = assay::ssd;
namespace gd = assay::gated_delta;
namespace m3 = assay::mamba3;
using Vec = std::vector<double>;

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

inline std::string label(const AttnShape& s) {
  return "B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) + " S=" + std::to_string(s.S) +
         " D=" + std::to_string(s.D);
}
inline std::string label(const SsdShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " P=" + std::to_string(s.P) + " N=" + std::to_string(s.N) + " G=" + std::to_string(s.G) +
         " Q=" + std::to_string(s.Q);
}
inline std::string label(const GdShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " K=" + std::to_string(s.K) + " V=" + std::to_string(s.V) + " Q=" + std::to_string(s.Q);
}
inline std::string label(const M3Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " G=" + std::to_string(s.G) + " N=" + std::to_string(s.N) + " P=" + std::to_string(s.P) +
         " S=" + std::to_string(s.S) + " Q=" + std::to_string(s.Q);
}

// Attention: dense, non-causal, Hq = Hkv, q/k/v normal (fixtures/attention.cpp).
struct AttnCase {
  att::Params p;
  Vec q, k, v, sink, dout;
};
inline AttnCase make_case(const AttnShape& s, uint64_t seed = 1) {
  AttnCase c;
  c.p.B = s.B, c.p.Sq = c.p.Sk = s.S, c.p.Hq = c.p.Hkv = s.H, c.p.D = c.p.Dv = s.D;
  Rng r(seed);
  const int64_t n = s.B * s.S * s.H * s.D;
  c.q = r.normal(n), c.k = r.normal(n), c.v = r.normal(n), c.dout = r.normal(n);
  return c;
}

// A case of an op whose oracle forms take (Params, Inputs): both, and the upstream gradient dout of
// the output for the backward forms.
template <class Params, class Inputs>
struct OpCase {
  Params p;
  Inputs in;
  Vec dout;
};

// SSD (fixtures/ssd.cpp): x, B, C, z normal; dt normal (raw, softplus(dt + dt_bias) in the
// oracle); A uniform [-1, -0.05]; dt_bias uniform [-3, -1]; D [H] normal. No bounds
// (compute_bounds = false): the forms' own work, as the torch references do.
using SsdCase = OpCase<ssd::Params, ssd::Inputs>;
inline SsdCase make_case(const SsdShape& s, uint64_t seed = 2) {
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
using GdCase = OpCase<gd::Params, gd::Inputs>;
inline GdCase make_case(const GdShape& s, uint64_t seed = 3) {
  GdCase c;
  c.p.B = s.B, c.p.T = s.T, c.p.H = c.p.HV = s.H, c.p.K = s.K, c.p.V = s.V, c.p.chunk_size = s.Q;
  c.p.gate = gd::GateMode::log, c.p.beta = gd::BetaMode::given, c.p.qk_l2norm = true;
  Rng r(seed);
  const int64_t nqk = s.B * s.T * s.H * s.K, nv = s.B * s.T * s.H * s.V, ng = s.B * s.T * s.H;
  c.in.q = r.normal(nqk), c.in.k = r.normal(nqk), c.in.v = r.normal(nv);
  c.in.g = r.uniform(ng, -1.0, 0.0), c.in.beta = r.uniform(ng, 0.0, 1.0);
  c.dout = r.normal(nv);
  return c;
}

// Mamba-3 SISO (fixtures/mamba3.cpp): Q, K, V, Trap, Angles, Z normal; DT uniform [0.005, 0.5];
// ADT = -DT * uniform [0.05, 1.5]; Q/K biases normal(1, 0.5); D normal; no input states.
using M3Case = OpCase<m3::SisoParams, m3::SisoInputs>;  // (no dout: forward forms only)
inline M3Case make_case(const M3Shape& s, uint64_t seed = 4) {
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

}  // namespace assay_bench
