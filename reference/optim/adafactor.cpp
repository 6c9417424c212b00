// Adafactor (spec B5; torch/optim/_adafactor.py, PyTorch >= 2.5): the fp32 form, the fp64 step
// and its second fp64 form (variance as row_var * (col_var / mean), pairwise norms). See optim.h.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "reference/core/check.h"
#include "reference/optim/optim.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

using detail::pairwise_sq;
using detail::sumsq;

// --------------------------------------------------------------------------------------------
// Adafactor (torch/optim/_adafactor.py, _single_tensor_adafactor):
//   t += 1; one_minus_beta2_t = t^beta2_decay; rho = min(lr, 1/sqrt(t));
//   alpha = max(eps2, ||p|| / sqrt(numel)) * rho        (param norm before the decay)
//   if wd: p *= 1 - lr wd
//   factored: row_mean = ||g_row||^2 / N; row_var.lerp_(row_mean, w); col likewise / M;
//             var = (row_var @ col_var) / clamp(mean(row_var), min=eps1)
//   else: var.lerp_(g*g, w); var_est = var
//   U = g * rsqrt(clamp(var, min=eps1^2)); denom = max(1, ||U|| / (sqrt(numel) d));
//   p += U * (-alpha / denom)
// maximize negates g first.
// --------------------------------------------------------------------------------------------
namespace {
template <typename F>
void adafactor_impl(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                    const std::vector<F>& graw, std::vector<F>& p, std::vector<F>& row_var,
                    std::vector<F>& col_var, std::vector<F>& variance, int64_t& step) {
  constexpr bool is32 = std::is_same_v<F, float>;
  const size_t n = static_cast<size_t>(M * N);
  ASSAY_INPUT_CHECK(graw.size() == n && p.size() == n, "adafactor: sizes");
  const double eps1 = h.eps1 ? *h.eps1 : (is32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -23));
  std::vector<F> g(graw);
  if (h.maximize)
    for (auto& e : g) e = -e;
  step += 1;
  const double t = static_cast<double>(step);
  const double omb2 = std::pow(t, h.beta2_decay);
  const double rho = std::min(h.lr, 1.0 / std::sqrt(t));
  const double pnorm = is32 ? static_cast<double>(f32(std::sqrt(sumsq(p)))) : std::sqrt(sumsq(p));
  const double alpha = std::max(h.eps2, pnorm / std::sqrt(static_cast<double>(n))) * rho;
  if (h.weight_decay != 0) {
    const F dm = static_cast<F>(1.0 - h.lr * h.weight_decay);
    for (auto& e : p) e = e * dm;
  }
  std::vector<F> var(n);
  const F w = static_cast<F>(omb2);
  auto lerp = [&](F self, F end) -> F {
    if constexpr (is32) return lerp_f32(self, end, w);
    return self + w * (end - self);
  };
  if (factored) {
    if (row_var.empty()) row_var.assign(M, F(0));
    if (col_var.empty()) col_var.assign(N, F(0));
    ASSAY_INPUT_CHECK(row_var.size() == static_cast<size_t>(M) && col_var.size() == static_cast<size_t>(N),
                      "adafactor: row/col var sizes");
    for (int64_t r = 0; r < M; ++r) {
      double s = 0;
      for (int64_t c = 0; c < N; ++c) s += static_cast<double>(g[r * N + c]) * g[r * N + c];
      F rm;
      if constexpr (is32) {
        const float nr = f32(std::sqrt(s));          // torch.norm (fp32 output)
        rm = (nr * nr) / static_cast<float>(N);      // .square_().div_(N)
      } else {
        rm = s / static_cast<double>(N);
      }
      row_var[r] = lerp(row_var[r], rm);
    }
    for (int64_t c = 0; c < N; ++c) {
      double s = 0;
      for (int64_t r = 0; r < M; ++r) s += static_cast<double>(g[r * N + c]) * g[r * N + c];
      F cm;
      if constexpr (is32) {
        const float nc = f32(std::sqrt(s));
        cm = (nc * nc) / static_cast<float>(M);
      } else {
        cm = s / static_cast<double>(M);
      }
      col_var[c] = lerp(col_var[c], cm);
    }
    double rs = 0;
    for (auto e : row_var) rs += e;
    F rmean = static_cast<F>(rs / static_cast<double>(M));
    rmean = std::max(rmean, static_cast<F>(eps1));
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) var[r * N + c] = (row_var[r] * col_var[c]) / rmean;
  } else {
    if (variance.empty()) variance.assign(n, F(0));
    ASSAY_INPUT_CHECK(variance.size() == n, "adafactor: variance size");
    for (size_t i = 0; i < n; ++i) {
      variance[i] = lerp(variance[i], g[i] * g[i]);
      var[i] = variance[i];
    }
  }
  const F floor2 = static_cast<F>(eps1 * eps1);
  std::vector<F> U(n);
  for (size_t i = 0; i < n; ++i) {
    const F vc = std::max(var[i], floor2);
    F rs;
    if constexpr (is32)
      rs = 1.0f / std::sqrt(vc);  // rsqrt: CUDA rsqrtf is approximate; tolerance quantity
    else
      rs = 1.0 / std::sqrt(vc);
    U[i] = rs * g[i];
  }
  double un = std::sqrt(sumsq(U));
  if constexpr (is32) un = f32(un);
  const double denom = std::max(1.0, un / (std::sqrt(static_cast<double>(n)) * h.d));
  const F a = static_cast<F>(-alpha / denom);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (is32)
      p[i] = std::fma(a, U[i], p[i]);
    else
      p[i] = p[i] + a * U[i];
  }
}
}  // namespace

void adafactor_step_f32(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                        const std::vector<float>& g, AdafactorState32& s) {
  adafactor_impl<float>(h, M, N, factored, g, s.p, s.row_var, s.col_var, s.variance, s.step);
}
void adafactor_step_f64(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                        const std::vector<double>& g, AdafactorState64& s) {
  adafactor_impl<double>(h, M, N, factored, g, s.p, s.row_var, s.col_var, s.variance, s.step);
}

void adafactor_step_f64_alt(const AdafactorHyper& h, int64_t M, int64_t N, bool factored,
                            const std::vector<double>& graw, AdafactorState64& s) {
  const size_t n = static_cast<size_t>(M * N);
  ASSAY_INPUT_CHECK(graw.size() == n && s.p.size() == n, "adafactor_alt: sizes");
  const double eps1 = h.eps1 ? *h.eps1 : std::ldexp(1.0, -23);
  std::vector<double> g(graw);
  if (h.maximize)
    for (auto& e : g) e = -e;
  s.step += 1;
  const double t = static_cast<double>(s.step);
  const double w = std::exp(h.beta2_decay * std::log(t));  // t^beta2_decay
  const double rho = std::min(h.lr, std::exp(-0.5 * std::log(t)));
  const double alpha =
      std::max(h.eps2, std::sqrt(pairwise_sq(s.p) / static_cast<double>(n))) * rho;
  if (h.weight_decay != 0)
    for (auto& e : s.p) e -= (h.lr * h.weight_decay) * e;
  std::vector<double> var(n);
  if (factored) {
    if (s.row_var.empty()) s.row_var.assign(M, 0.0);
    if (s.col_var.empty()) s.col_var.assign(N, 0.0);
    std::vector<double> col(M);
    for (int64_t r = 0; r < M; ++r) {
      const double rm = pairwise_sq(&g[r * N], N) / static_cast<double>(N);
      s.row_var[r] = (1 - w) * s.row_var[r] + w * rm;
    }
    for (int64_t c = 0; c < N; ++c) {
      for (int64_t r = 0; r < M; ++r) col[r] = g[r * N + c];
      const double cm = pairwise_sq(col) / static_cast<double>(M);
      s.col_var[c] = (1 - w) * s.col_var[c] + w * cm;
    }
    double rsum = 0;
    for (int64_t r = M - 1; r >= 0; --r) rsum += s.row_var[r];
    const double rmean = std::max(rsum / static_cast<double>(M), eps1);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) var[r * N + c] = s.row_var[r] * (s.col_var[c] / rmean);
  } else {
    if (s.variance.empty()) s.variance.assign(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      s.variance[i] = (1 - w) * s.variance[i] + w * g[i] * g[i];
      var[i] = s.variance[i];
    }
  }
  std::vector<double> U(n);
  for (size_t i = 0; i < n; ++i) U[i] = g[i] / std::sqrt(std::max(var[i], eps1 * eps1));
  const double rms = std::sqrt(pairwise_sq(U) / static_cast<double>(n)) / h.d;
  const double denom = rms > 1 ? rms : 1.0;
  for (size_t i = 0; i < n; ++i) s.p[i] -= (alpha / denom) * U[i];
}

}  // namespace assay::optim
