// Tests of the gated delta rule decode step (reference/gated_delta/gated_delta.h decode_step()):
// decoding token by token through a state pool equals the chunked prefill of the same tokens.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "catch_compat.h"
#include "reference/core/tensor.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/gated_delta/tests/gated_delta_test_inputs.h"

using namespace assay;
using namespace assay::gated_delta;
using gated_delta_test::base;
using gated_delta_test::make_inputs;

TEST_CASE("decode step over many sequences", "[cpu][L0]") {
  // N = 3 sequences decoded for 20 steps from non-zero states == a prefill of the same tokens.
  const int64_t N = 3, T = 20, H = 1, HV = 2, K = 8, V = 8;
  Params p = base(N, T, H, HV, K, V, 16);
  p.qk_l2norm = true;
  p.gate = GateMode::in_kernel;
  p.beta = BetaMode::sigmoid;
  const Inputs in = make_inputs(p, 99);
  const Result pre = chunked(p, in);

  DecodeParams dp;
  static_cast<Options&>(dp) = static_cast<const Options&>(p);
  dp.N = N, dp.H = H, dp.HV = HV, dp.K = K, dp.V = V;
  // The pool holds 5 slots; sequences live in slots {3, 0, 4}; one padding entry (-1) is added.
  const std::vector<int64_t> slot = {3, 0, 4};
  gated_delta_test::Rng rng(5, gated_delta_test::kForwardSalt);
  std::vector<double> pool = rng.vec(5 * HV * K * V);
  const std::vector<double> pool0 = pool;
  for (int64_t n = 0; n < N; ++n)
    std::copy(in.initial_state.begin() + n * HV * K * V, in.initial_state.begin() + (n + 1) * HV * K * V,
              pool.begin() + slot[n] * HV * K * V);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    DecodeInputs di;
    DecodeParams dpp = dp;
    dpp.N = N + 1;
    auto tok = [&](const std::vector<double>& x, int64_t per) {
      std::vector<double> y;
      for (int64_t n = 0; n < N; ++n)
        y.insert(y.end(), x.begin() + (n * T + t) * per, x.begin() + (n * T + t + 1) * per);
      y.insert(y.end(), x.begin() + t * per, x.begin() + (t + 1) * per);  // padding row: any values
      return y;
    };
    di.q = tok(in.q, H * K), di.k = tok(in.k, H * K), di.v = tok(in.v, HV * V);
    di.g = tok(in.g, HV), di.beta = tok(in.beta, HV);
    di.A_log = in.A_log, di.dt_bias = in.dt_bias;
    di.state = pool;
    di.state_indices = {slot[0], slot[1], slot[2], -1};
    const DecodeResult r = decode_step(dpp, di);
    pool = r.state;
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> a(r.o.begin() + n * HV * V, r.o.begin() + (n + 1) * HV * V);
      std::vector<double> b(pre.o.begin() + (n * T + t) * HV * V, pre.o.begin() + (n * T + t + 1) * HV * V);
      worst = std::max(worst, agreement_rel(a, b));
    }
    for (int64_t x = N * HV * V; x < (N + 1) * HV * V; ++x) CHECK(r.o[x] == 0.0);  // padding slot
  }
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> a(pool.begin() + slot[n] * HV * K * V, pool.begin() + (slot[n] + 1) * HV * K * V);
    std::vector<double> b(pre.final_state.begin() + n * HV * K * V, pre.final_state.begin() + (n + 1) * HV * K * V);
    worst = std::max(worst, agreement_rel(a, b));
  }
  // Untouched slots (1, 2) are copied through.
  for (int64_t s : {1, 2})
    for (int64_t x = s * HV * K * V; x < (s + 1) * HV * K * V; ++x) CHECK(pool[x] == pool0[x]);
  std::printf("[gated_delta] decode steps vs chunked prefill: worst max_rel %.3e\n", worst);
  CHECK(worst <= 1e-12);
}
