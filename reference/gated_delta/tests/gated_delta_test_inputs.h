// Test inputs shared by the gated delta oracle tests (test_gated_delta.cpp, test_gated_delta_decode.cpp,
// test_gated_delta_backward.cpp): a test-local deterministic RNG (the fixture RNG lives in
// fixtures/gen), Params of a shape, and random forward Inputs.
#pragma once
#include <cstdint>
#include <vector>

#include "reference/gated_delta/gated_delta.h"
#include "tests/common.h"

namespace gated_delta_test {

using namespace assay::gated_delta;

// Counter-based test inputs (splitmix64) from seed * 2^64/phi + salt (each suite its own salt):
// uniform in [-1, 1) (uni) or [0, 1) (u01).
struct Rng : assay_test::SplitMix64 {
  Rng(uint64_t seed, uint64_t salt) : SplitMix64{seed * 0x9E3779B97F4A7C15ull + salt} {}
  double uni() { return static_cast<double>(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0; }  // [-1, 1)
  std::vector<double> vec(int64_t n, double scale = 1.0) {
    std::vector<double> x(n);
    for (auto& v : x) v = scale * uni();
    return x;
  }
};
inline constexpr uint64_t kForwardSalt = 12345;  // the forward tests' inputs (make_inputs)

inline Params base(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V, int64_t C) {
  Params p;
  p.B = B, p.T = T, p.H = H, p.HV = HV, p.K = K, p.V = V, p.chunk_size = C;
  return p;
}

// Sequences: B, or the varlen count.
inline int64_t num_seqs(const Params& p) {
  return p.cu_seqlens.empty() ? p.B : static_cast<int64_t>(p.cu_seqlens.size()) - 1;
}

// The distributions of make_inputs.
struct Gen {
  double key_scale = 1.0;       // q/k ~ U(-1,1) * key_scale
  double gate_lo = 0.0, gate_hi = 0.3;  // g ~ -U(gate_lo, gate_hi) (GateMode::log)
  double beta_lo = 0.0, beta_hi = 1.0;  // beta ~ U(lo, hi) (BetaMode::given), logits U(-3,3) otherwise
  bool h0 = true;
};

inline Inputs make_inputs(const Params& p, uint64_t seed, const Gen& gen = {}) {
  Rng r(seed, kForwardSalt);
  Inputs in;
  const int64_t BT = p.B * p.T;
  in.q = r.vec(BT * p.H * p.K, gen.key_scale);
  in.k = r.vec(BT * p.H * p.K, gen.key_scale);
  in.v = r.vec(BT * p.HV * p.V);
  if (p.gate == GateMode::log) {
    in.g.resize(BT * p.HV);
    for (auto& x : in.g) x = -(gen.gate_lo + (gen.gate_hi - gen.gate_lo) * r.u01());
  } else if (p.gate == GateMode::in_kernel) {
    in.g = r.vec(BT * p.HV, 3.0);
    in.A_log = r.vec(p.HV, 1.0);
    in.dt_bias = r.vec(p.HV, 0.5);
  }
  in.beta.resize(BT * p.HV);
  for (auto& x : in.beta)
    x = p.beta == BetaMode::given ? gen.beta_lo + (gen.beta_hi - gen.beta_lo) * r.u01() : 3.0 * r.uni();
  if (gen.h0) in.initial_state = r.vec(num_seqs(p) * p.HV * p.K * p.V, 0.5);
  return in;
}

}  // namespace gated_delta_test
