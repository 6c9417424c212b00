// Test inputs shared by the SSD oracle tests (reference/ssd/tests/test_ssd*.cpp): a test-local
// deterministic RNG (the fixture RNG lives in fixtures/gen), Params of a chunk size and random
// ssd::Inputs of a shape.
#pragma once
#include <cstdint>
#include <vector>

#include "reference/ssd/ssd.h"
#include "tests/common.h"

namespace ssd_test {

struct Rng : assay_test::SplitMix64 {
  explicit Rng(uint64_t seed) : SplitMix64{seed} {}
  double uni(double lo, double hi) { return lo + (hi - lo) * u01(); }  // [lo, hi)
  std::vector<double> vec(int64_t n, double lo, double hi) {
    std::vector<double> v(n);
    for (auto& e : v) e = uni(lo, hi);
    return v;
  }
};

struct Cfg {
  int64_t B = 1, T = 65, H = 4, P = 8, G = 2, N = 8;
  bool D = true, D_per_p = false, z = true, bias = true, h0 = true;
  double a_lo = -1.5, a_hi = -0.2;     // A range
  double dt_lo = -3.0, dt_hi = 1.0;    // raw dt range (softplus on by default)
  uint64_t seed = 1;
};

// Params with chunk size Q and dt_softplus (everything else the defaults).
inline assay::ssd::Params params(int64_t Q, bool softplus = true) {
  assay::ssd::Params p;
  p.chunk_size = Q;
  p.dt_softplus = softplus;
  return p;
}

// Draws, in this order: x, dt, A, B, C, then D, z, dt_bias, initial_states where the Cfg asks.
inline assay::ssd::Inputs make_inputs(const Cfg& c) {
  Rng r(c.seed);
  assay::ssd::Inputs in;
  in.batch = c.B, in.seqlen = c.T, in.nheads = c.H, in.headdim = c.P, in.ngroups = c.G,
  in.dstate = c.N;
  in.x = r.vec(c.B * c.T * c.H * c.P, -1, 1);
  in.dt = r.vec(c.B * c.T * c.H, c.dt_lo, c.dt_hi);
  in.A = r.vec(c.H, c.a_lo, c.a_hi);
  in.B = r.vec(c.B * c.T * c.G * c.N, -1, 1);
  in.C = r.vec(c.B * c.T * c.G * c.N, -1, 1);
  if (c.D) in.D = r.vec(c.D_per_p ? c.H * c.P : c.H, -1, 1);
  if (c.z) in.z = r.vec(c.B * c.T * c.H * c.P, -2, 2);
  if (c.bias) in.dt_bias = r.vec(c.H, -0.5, 0.5);
  if (c.h0) in.initial_states = r.vec(c.B * c.H * c.P * c.N, -1, 1);
  return in;
}

}  // namespace ssd_test
