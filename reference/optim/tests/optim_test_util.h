// Shared by the optim oracle tests (reference/optim/tests/test_<optimizer>.cpp, one test binary
// test_optim): a portable RNG and a random Adam-like state with magnitudes from 1e-8 to 1e4.
#pragma once
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "reference/core/dtype.h"
#include "reference/core/tensor.h"
#include "reference/optim/optim.h"
#include "tests/common.h"

namespace optim_test {

using namespace assay::optim;

// splitmix64: deterministic, portable.
struct Rng : assay_test::SplitMix64 {
  explicit Rng(uint64_t seed) : SplitMix64{seed} {}
  double uni() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // sign * 10^U(lo, hi), rounded to float
  float logmag(double lo, double hi) {
    const double e = lo + (hi - lo) * uni();
    const double x = std::pow(10.0, e) * ((next() & 1) ? 1.0 : -1.0);
    return static_cast<float>(x);
  }
};

inline std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// A state with magnitudes from 1e-8 to 1e4, a block of zero gradients, v consistent with m.
struct Case {
  std::vector<float> g, p, m, v, vmax;
};
inline Case random_case(size_t n, uint64_t seed) {
  Rng r(seed);
  Case c;
  c.g.resize(n), c.p.resize(n), c.m.resize(n), c.v.resize(n), c.vmax.resize(n);
  for (size_t i = 0; i < n; ++i) {
    c.g[i] = (i % 16 == 3) ? 0.0f : r.logmag(-8, 4);
    c.p[i] = r.logmag(-8, 4);
    c.m[i] = (i % 32 == 5) ? 0.0f : r.logmag(-8, 4);
    const double k = 0.5 + 3.0 * r.uni();
    c.v[i] = static_cast<float>(static_cast<double>(c.m[i]) * c.m[i] * k * k);
    c.vmax[i] = static_cast<float>(c.v[i] * (0.5 + r.uni()));
  }
  return c;
}

inline bool same_bits(float a, float b) { return bits_of(a) == bits_of(b); }

inline AdamState32 st32(const Case& c, int64_t step) { return {c.p, c.m, c.v, c.vmax, step}; }
inline AdamState64 st64(const Case& c, int64_t step) {
  return {widen(c.p), widen(c.m), widen(c.v), widen(c.vmax), step};
}

}  // namespace optim_test
