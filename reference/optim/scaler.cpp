// Dynamic loss scaling (spec B6): torch GradScaler (unscale_, _amp_update_scale_) and Megatron
// DynamicGradScaler. See optim.h.
#include <algorithm>
#include <cmath>

#include "reference/optim/optim.h"

namespace assay::optim {

bool grad_scaler_unscale(const GradScalerState& st, std::vector<std::vector<float>>& grads) {
  const float inv = f32(1.0 / static_cast<double>(st.scale));
  bool found_inf = false;
  for (auto& g : grads)
    for (float& e : g) {
      if (!std::isfinite(e)) found_inf = true;
      if (inv != 1.0f) e = e * inv;
    }
  return found_inf;
}

void grad_scaler_update(const GradScalerHyper& h, GradScalerState& st, bool found_inf) {
  if (found_inf) {
    st.scale = st.scale * f32(h.backoff_factor);
    st.growth_tracker = 0;
    return;
  }
  const int64_t successful = st.growth_tracker + 1;
  if (successful == h.growth_interval) {
    const float ns = st.scale * f32(h.growth_factor);
    if (!h.overflow_guard || std::isfinite(ns)) st.scale = ns;
    st.growth_tracker = 0;
  } else {
    st.growth_tracker = successful;
  }
}

void megatron_scaler_update(const MegatronScalerHyper& h, MegatronScalerState& st, bool found_inf) {
  if (found_inf) {
    st.growth_tracker = 0;
    st.hysteresis_tracker -= 1;
    if (st.hysteresis_tracker <= 0)
      st.scale = std::max(st.scale * f32(h.backoff_factor), f32(h.min_scale));
  } else {
    st.growth_tracker += 1;
    if (st.growth_tracker == h.growth_interval) {
      st.growth_tracker = 0;
      st.hysteresis_tracker = h.hysteresis;
      st.scale = st.scale * f32(h.growth_factor);
    }
  }
}

}  // namespace assay::optim
