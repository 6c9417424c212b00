// Tests of the loss-scaler oracles (reference/optim/scaler.cpp).
// Every expected value is either derived by hand in a comment or computed by an independent
// route (fp64 textbook form, long-double formula, exhaustive count, the core bf16 codec).
#include "reference/optim/tests/optim_test_util.h"

using namespace assay::optim;
using namespace optim_test;

TEST_CASE("grad scaler: unscale, found_inf, growth, backoff, overflow guard, Megatron hysteresis",
          "[cpu][L0]") {
  GradScalerState st;  // 2^16
  std::vector<std::vector<float>> g{{65536.0f, -131072.0f}, {3.0f}};
  CHECK_FALSE(grad_scaler_unscale(st, g));
  CHECK(g[0][0] == 1.0f);
  CHECK(g[0][1] == -2.0f);
  CHECK(g[1][0] == 3.0f * 0x1p-16f);
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<std::vector<float>> gi{{1.0f}, {bad}};
    CHECK(grad_scaler_unscale(st, gi));
  }
  GradScalerHyper h;
  h.growth_interval = 3;
  // two good steps: tracker 1, 2; third: scale 2^17, tracker 0.
  grad_scaler_update(h, st, false);
  grad_scaler_update(h, st, false);
  CHECK(st.scale == 65536.0f);
  CHECK(st.growth_tracker == 2);
  grad_scaler_update(h, st, false);
  CHECK(st.scale == 131072.0f);
  CHECK(st.growth_tracker == 0);
  // inf: backoff and reset; the next two good steps must not grow (mutant: growth after inf).
  grad_scaler_update(h, st, false);
  grad_scaler_update(h, st, true);
  CHECK(st.scale == 65536.0f);
  CHECK(st.growth_tracker == 0);
  grad_scaler_update(h, st, false);
  grad_scaler_update(h, st, false);
  CHECK(st.scale == 65536.0f);
  // overflow guard: 2^127 with interval 1 stays 2^127, tracker 0; without the guard -> inf.
  GradScalerHyper g1;
  g1.growth_interval = 1;
  GradScalerState big{0x1p127f, 0};
  grad_scaler_update(g1, big, false);
  CHECK(big.scale == 0x1p127f);
  CHECK(big.growth_tracker == 0);
  g1.overflow_guard = false;
  grad_scaler_update(g1, big, false);
  CHECK(std::isinf(big.scale));

  MegatronScalerHyper mh;
  mh.growth_interval = 2, mh.hysteresis = 2, mh.min_scale = 4.0;
  MegatronScalerState ms{16.0f, 0, 2};
  megatron_scaler_update(mh, ms, true);  // hysteresis 2 -> 1: no backoff yet
  CHECK(ms.scale == 16.0f);
  CHECK(ms.hysteresis_tracker == 1);
  megatron_scaler_update(mh, ms, true);  // 1 -> 0: backoff to 8
  CHECK(ms.scale == 8.0f);
  megatron_scaler_update(mh, ms, true);  // -1: 4
  megatron_scaler_update(mh, ms, true);  // min_scale floor 4
  CHECK(ms.scale == 4.0f);
  megatron_scaler_update(mh, ms, false);
  megatron_scaler_update(mh, ms, false);  // growth: 8, hysteresis reset to 2
  CHECK(ms.scale == 8.0f);
  CHECK(ms.hysteresis_tracker == 2);
  CHECK(ms.growth_tracker == 0);
  megatron_scaler_update(mh, ms, true);  // one inf after a reset: no backoff
  CHECK(ms.scale == 8.0f);
}
