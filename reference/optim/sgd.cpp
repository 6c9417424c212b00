// SGD (spec B5; torch 2.11 _single_tensor_sgd): the fp32 emulation, the fp64 step and its second
// fp64 form (the update split into its terms). See optim.h.
#include <algorithm>
#include <cmath>

#include "reference/core/check.h"
#include "reference/optim/optim.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

namespace {
// Preconditions of every SGD form: p of g's length; nesterov needs momentum > 0 and dampening 0.
void check_sgd(const SgdHyper& h, size_t n, size_t p_size) {
  ASSAY_INPUT_CHECK(p_size == n, "sgd: p size");
  ASSAY_INPUT_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0),
                    "sgd: nesterov requires momentum > 0 and dampening 0");
}
// The checks and the fresh momentum buffer (zeros) of both fp64 forms; true on the first momentum step.
bool start_f64(const SgdHyper& h, size_t n, SgdState64& s) {
  check_sgd(h, n, s.p.size());
  const bool first = s.buf.empty();
  if (h.momentum != 0 && first) s.buf.assign(n, 0.0);
  return first;
}
}  // namespace

// --------------------------------------------------------------------------------------------
// SGD: torch 2.11 _single_tensor_sgd. maximize negates g first; g = g.add(p, alpha=wd);
// first step buf = g.clone(); later buf.mul_(mu).add_(g, alpha=1-tau); nesterov g = g.add(buf,
// alpha=mu) else g = buf; p.add_(g, alpha=-lr). add(x, alpha=a) -> fma(f32(a), x, self).
// (maximize: torch 2.11 negates the grad; the spec's "p <- p + lr g" is the same update.)
// --------------------------------------------------------------------------------------------
void sgd_step_f32(const SgdHyper& h, const std::vector<float>& g, SgdState32& s) {
  const size_t n = g.size();
  check_sgd(h, n, s.p.size());
  const bool first = s.buf.empty();
  if (h.momentum != 0 && first) s.buf.resize(n);
  const float wd = f32(h.weight_decay), mu = f32(h.momentum), omt = f32(1.0 - h.dampening),
              nlr = f32(-h.lr);
  for (size_t i = 0; i < n; ++i) {
    float gi = h.maximize ? -g[i] : g[i];
    if (h.weight_decay != 0) gi = std::fma(wd, s.p[i], gi);
    if (h.momentum != 0) {
      float b;
      if (first) {
        b = gi;
      } else {
        b = s.buf[i] * mu;
        b = std::fma(omt, gi, b);
      }
      s.buf[i] = b;
      gi = h.nesterov ? std::fma(mu, b, gi) : b;
    }
    s.p[i] = std::fma(nlr, gi, s.p[i]);
  }
  s.step += 1;
}

void sgd_step_f64(const SgdHyper& h, const std::vector<double>& g, SgdState64& s) {
  // Follows the implementation's maximize (negate the raw grad first). The docs' algorithm box
  // ("theta + gamma g" at the end, after the decay term was added) would make weight decay grow
  // the weights under maximize; the source wins (spec header).
  const size_t n = g.size();
  const bool first = start_f64(h, n, s);
  for (size_t i = 0; i < n; ++i) {
    double gi = (h.maximize ? -g[i] : g[i]) + h.weight_decay * s.p[i];
    if (h.momentum != 0) {
      s.buf[i] = first ? gi : h.momentum * s.buf[i] + (1.0 - h.dampening) * gi;
      gi = h.nesterov ? gi + h.momentum * s.buf[i] : s.buf[i];
    }
    s.p[i] = s.p[i] - h.lr * gi;
  }
  s.step += 1;
}

void sgd_step_f64_alt(const SgdHyper& h, const std::vector<double>& g, SgdState64& s) {
  const size_t n = g.size();
  const bool first = start_f64(h, n, s);
  for (size_t i = 0; i < n; ++i) {
    const double sign = h.maximize ? -1.0 : 1.0;
    const double d = sign * g[i] + h.weight_decay * s.p[i];
    if (h.momentum == 0) {
      s.p[i] -= h.lr * d;
      continue;
    }
    // buf_t = mu buf + (1 - tau) d, written in the other order
    const double prev = first ? 0.0 : s.buf[i];
    const double b = first ? d : (1 - h.dampening) * d + h.momentum * prev;
    s.buf[i] = b;
    if (h.nesterov)
      s.p[i] = (s.p[i] - h.lr * d) - (h.lr * h.momentum) * b;
    else if (first)
      s.p[i] = s.p[i] - h.lr * d;
    else  // p - lr ((1 - tau) d + mu buf) split into its two terms
      s.p[i] = (s.p[i] - (h.lr * (1 - h.dampening)) * d) - (h.lr * h.momentum) * prev;
  }
  s.step += 1;
}

}  // namespace assay::optim
