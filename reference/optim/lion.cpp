// Lion (spec B5; lucidrains lion-pytorch update_fn): the fp32 emulation, the fp64 step and its
// second fp64 form (lerp form). See optim.h.
#include <algorithm>
#include <cmath>

#include "reference/core/check.h"
#include "reference/optim/optim.h"

namespace assay::optim {

// --------------------------------------------------------------------------------------------
// Lion (lucidrains update_fn): p.mul_(1 - lr wd); update = m.clone().mul_(b1).add(g, alpha=1-b1)
// .sign_(); p.add_(update, alpha=-lr); m.mul_(b2).add_(g, alpha=1-b2).
// --------------------------------------------------------------------------------------------
namespace {
float signf(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : (std::isnan(x) ? x : 0.0f)); }
double signd(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : (std::isnan(x) ? x : 0.0)); }
}  // namespace

void lion_step_f32(const LionHyper& h, const std::vector<float>& g, std::vector<float>& p,
                   std::vector<float>& m) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(p.size() == n && m.size() == n, "lion: size mismatch");
  const float dm = f32(1.0 - h.lr * h.weight_decay), b1 = f32(h.beta1), omb1 = f32(1.0 - h.beta1),
              b2 = f32(h.beta2), omb2 = f32(1.0 - h.beta2), nlr = f32(-h.lr);
  for (size_t i = 0; i < n; ++i) {
    float pi = p[i] * dm;
    const float c = std::fma(omb1, g[i], m[i] * b1);
    pi = std::fma(nlr, signf(c), pi);
    m[i] = std::fma(omb2, g[i], m[i] * b2);
    p[i] = pi;
  }
}
void lion_step_f64(const LionHyper& h, const std::vector<double>& g, std::vector<double>& p,
                   std::vector<double>& m) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(p.size() == n && m.size() == n, "lion: size mismatch");
  for (size_t i = 0; i < n; ++i) {
    const double c = h.beta1 * m[i] + (1.0 - h.beta1) * g[i];
    p[i] = p[i] * (1.0 - h.lr * h.weight_decay) - h.lr * signd(c);
    m[i] = h.beta2 * m[i] + (1.0 - h.beta2) * g[i];
  }
}

void lion_step_f64_alt(const LionHyper& h, const std::vector<double>& g, std::vector<double>& p,
                       std::vector<double>& m) {
  const size_t n = g.size();
  ASSAY_INPUT_CHECK(p.size() == n && m.size() == n, "lion_alt: sizes");
  for (size_t i = 0; i < n; ++i) {
    const double c = m[i] + (1 - h.beta1) * (g[i] - m[i]);
    const double sg = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
    p[i] = p[i] - h.lr * (h.weight_decay * p[i] + sg);
    m[i] = m[i] + (1 - h.beta2) * (g[i] - m[i]);
  }
}

}  // namespace assay::optim
