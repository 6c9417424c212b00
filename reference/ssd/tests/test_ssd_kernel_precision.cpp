// Tests of the SSD kernel-precision emulation (reference/ssd/ssd_kernel_precision.cpp): round_tf32,
// and chunked_kernel_precision computing the same function as the fp64 recurrence (fp32 io).
#include <algorithm>
#include <cstdio>

#include "catch_compat.h"
#include "reference/ssd/tests/ssd_test_inputs.h"

using namespace assay;
using namespace ssd_test;

TEST_CASE("ssd: round_tf32 keeps 10 mantissa bits, ties to even", "[cpu][L0]") {
  REQUIRE(ssd::round_tf32(1.0) == 1.0);
  REQUIRE(ssd::round_tf32(1.0 + 0x1p-10) == 1.0 + 0x1p-10);         // representable
  REQUIRE(ssd::round_tf32(1.0 + 0x1p-11) == 1.0);                   // tie, to even (down)
  REQUIRE(ssd::round_tf32(1.0 + 3 * 0x1p-11) == 1.0 + 0x1p-9);      // tie, to even (up)
  REQUIRE(ssd::round_tf32(1.0 + 0x1p-11 + 0x1p-20) == 1.0 + 0x1p-10);  // above the tie
  REQUIRE(ssd::round_tf32(-(1.0 + 0x1p-11 + 0x1p-20)) == -(1.0 + 0x1p-10));
  REQUIRE(ssd::round_tf32(0x1p-130) == 0x1p-130);                   // fp32 subnormal, 1 bit
  REQUIRE(ssd::round_tf32(0.0) == 0.0);
}

TEST_CASE("ssd: the kernel-precision emulation computes the same function (fp32 io)", "[cpu][L0]") {
  // Structure check of chunked_kernel_precision, not a tolerance: with fp32 io and states every
  // rounding is fp32, so it must agree with the fp64 recurrence to a few fp32 ulps scaled by the
  // output range, on out, final_states and varlen_states (packed sequences, mid-chunk starts,
  // initial states of sequence 0). A wrong mask, carry or decay would be O(1).
  Cfg c;
  c.T = 200, c.seed = 45;
  ssd::Inputs in = make_inputs(c);
  for (auto* v : {&in.x, &in.B, &in.C, &in.z, &in.dt, &in.A, &in.D, &in.dt_bias, &in.initial_states})
    for (auto& e : *v) e = round_to(DType::f32, e);
  in.seq_idx.assign(c.T, 0);
  for (int64_t t = 0; t < c.T; ++t) in.seq_idx[t] = t < 10 ? 0 : (t < 150 ? 1 : 2);
  in.cu_seqlens = {0, 10, 150, 200};
  for (int64_t Q : {16, 64}) {
    const ssd::Params p = params(Q);
    const auto truth = ssd::recurrence(p, in);
    for (bool tf32 : {false, true}) {
      const auto emu = ssd::chunked_kernel_precision(p, in, {DType::f32, DType::f32, tf32});
      const double e = std::max({agreement_rel(emu.out, truth.out),
                                 agreement_rel(emu.final_states, truth.final_states),
                                 agreement_rel(emu.varlen_states, truth.varlen_states)});
      std::printf("[ssd] Q=%lld kernel-precision emulation (fp32%s) agreement_rel %.3e\n",
                  static_cast<long long>(Q), tf32 ? ", tf32 dots" : "", e);
      INFO("Q=" << Q << " tf32=" << tf32);
      CHECK(e < (tf32 ? 1e-2 : 1e-4));
      CHECK(e > 0.0);
    }
  }
}
