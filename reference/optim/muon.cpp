// Muon (spec B4): momentum, Newton-Schulz orthogonalisation (fp64 loops, its second fp64 form with
// Eigen products on the smaller Gram side, and the bf16-GEMM / fp32 emulations), scale rules.
// See optim.h.
#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "reference/core/check.h"
#include "reference/optim/optim.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

using detail::sumsq;

const char* name(NsCoeffs c) {
  switch (c) {
    case NsCoeffs::simple: return "simple";
    case NsCoeffs::quintic: return "quintic";
    case NsCoeffs::deepseekv4: return "deepseekv4";
  }
  return "?";
}

void ns_coeffs(NsCoeffs set, int i, double& a, double& b, double& c) {
  switch (set) {
    case NsCoeffs::simple:
      a = 3.4445, b = -4.7750, c = 2.0315;
      return;
    case NsCoeffs::quintic: {
      // EO "quintic": five distinct tuples, cycled.
      static const double q[5][3] = {{4.0848, -6.8946, 2.9270},
                                     {3.9505, -6.3029, 2.6377},
                                     {3.7418, -5.5913, 2.3037},
                                     {2.8769, -3.1427, 1.2046},
                                     {2.8366, -3.0525, 1.2012}};
      const int k = i % 5;
      a = q[k][0], b = q[k][1], c = q[k][2];
      return;
    }
    case NsCoeffs::deepseekv4:
      // (3.4445, -4.7750, 2.0315) x 8, then (2, -1.5, 0.5) x 2; beyond 10 the last tuple repeats.
      if (i < 8)
        a = 3.4445, b = -4.7750, c = 2.0315;
      else
        a = 2.0, b = -1.5, c = 0.5;
      return;
  }
}

double muon_scale_factor(MuonScale s, int64_t rows, int64_t cols, double extra) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  switch (s) {
    case MuonScale::shape_scaling: return std::sqrt(std::max(1.0, r / c));
    case MuonScale::spectral: return extra * std::sqrt(std::max(r, c));
    case MuonScale::unit_rms_norm: return std::sqrt(r / c);
  }
  return 1.0;
}

namespace {

template <typename F>
std::vector<F> transpose(const std::vector<F>& X, int64_t R, int64_t C) {
  std::vector<F> T(X.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) T[c * R + r] = X[r * C + c];
  return T;
}

// C[R x K] = A[R x J] * B[J x K] in double.
std::vector<double> matmul(const std::vector<double>& A, const std::vector<double>& B, int64_t R,
                           int64_t J, int64_t K) {
  std::vector<double> C(static_cast<size_t>(R * K), 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < J; ++j) {
      const double a = A[r * J + j];
      for (int64_t k = 0; k < K; ++k) C[r * K + k] += a * B[j * K + k];
    }
  return C;
}

// GEMMs of the NS iteration (newton_schulz_rounded): the products of bf16 values are exact in
// double (8+8 significant bits); their sum is formed in double and rounded to fp32 then to bf16
// (cuBLAS accumulates in fp32 in an implementation-defined order: this is a tolerance form).
float rb(float x) { return bf16_to_f32(bf16_rne(x)); }

}  // namespace

std::vector<double> newton_schulz_f64(const std::vector<double>& G, int64_t M, int64_t N,
                                      int steps, NsCoeffs set, double eps, bool transpose_tall) {
  ASSAY_INPUT_CHECK(static_cast<int64_t>(G.size()) == M * N, "newton_schulz: G size");
  const bool tr = transpose_tall && M > N;
  std::vector<double> X = tr ? transpose(G, M, N) : G;
  const int64_t R = tr ? N : M, C = tr ? M : N;
  const double d = std::sqrt(sumsq(X)) + eps;
  for (double& e : X) e /= d;
  for (int i = 0; i < steps; ++i) {
    double a, b, c;
    ns_coeffs(set, i, a, b, c);
    const std::vector<double> Xt = transpose(X, R, C);
    const std::vector<double> A = matmul(X, Xt, R, C, R);
    const std::vector<double> AA = matmul(A, A, R, R, R);
    std::vector<double> B(A.size());
    for (size_t k = 0; k < A.size(); ++k) B[k] = b * A[k] + c * AA[k];
    const std::vector<double> BX = matmul(B, X, R, R, C);
    for (size_t k = 0; k < X.size(); ++k) X[k] = a * X[k] + BX[k];
  }
  return tr ? transpose(X, R, C) : X;
}

namespace {
// The NS iteration with every GEMM output and elementwise result rounded to bf16 (KJ's code) or,
// with bf16 = false, kept in fp32 (an fp32 kernel: the same operation order, fp32 roundings).
std::vector<float> newton_schulz_rounded(const std::vector<float>& G, int64_t M, int64_t N, int steps,
                                         NsCoeffs set, double eps, bool transpose_tall, bool bf16) {
  auto rb = [bf16](float x) { return bf16 ? bf16_to_f32(bf16_rne(x)) : x; };
  auto matmul_bf16 = [&](const std::vector<float>& A, const std::vector<float>& B, int64_t R, int64_t J, int64_t K) {
    std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end());
    const std::vector<double> Cd = matmul(Ad, Bd, R, J, K);
    std::vector<float> C(Cd.size());
    for (size_t i = 0; i < Cd.size(); ++i) C[i] = rb(f32(Cd[i]));
    return C;
  };
  ASSAY_INPUT_CHECK(static_cast<int64_t>(G.size()) == M * N, "newton_schulz: G size");
  std::vector<float> X0(G.size());
  for (size_t i = 0; i < G.size(); ++i) X0[i] = rb(G[i]);  // G.bfloat16()
  const bool tr = transpose_tall && M > N;
  std::vector<float> X = tr ? transpose(X0, M, N) : X0;
  const int64_t R = tr ? N : M, C = tr ? M : N;
  const float nrm = rb(f32(std::sqrt(sumsq(X))));   // X.norm(): bf16 output
  const float d = rb(nrm + f32(eps));        // + 1e-7 in opmath float, bf16 result
  for (float& e : X) e = rb(e / d);
  for (int i = 0; i < steps; ++i) {
    double a, b, c;
    ns_coeffs(set, i, a, b, c);
    const float af = f32(a), bf = f32(b), cf = f32(c);
    const std::vector<float> Xt = transpose(X, R, C);
    const std::vector<float> A = matmul_bf16(X, Xt, R, C, R);  // A = X @ X.mT
    std::vector<float> cA(A.size()), B(A.size());
    for (size_t k = 0; k < A.size(); ++k) cA[k] = rb(cf * A[k]);
    const std::vector<float> cAA = matmul_bf16(cA, A, R, R, R);  // (c * A) @ A
    for (size_t k = 0; k < A.size(); ++k) B[k] = rb(rb(bf * A[k]) + cAA[k]);
    const std::vector<float> BX = matmul_bf16(B, X, R, R, C);
    for (size_t k = 0; k < X.size(); ++k) X[k] = rb(rb(af * X[k]) + BX[k]);
  }
  return tr ? transpose(X, R, C) : X;
}
}  // namespace

std::vector<float> newton_schulz_bf16(const std::vector<float>& G, int64_t M, int64_t N, int steps,
                                      NsCoeffs set, double eps, bool transpose_tall) {
  return newton_schulz_rounded(G, M, N, steps, set, eps, transpose_tall, true);
}
std::vector<float> newton_schulz_f32(const std::vector<float>& G, int64_t M, int64_t N, int steps,
                                     NsCoeffs set, double eps, bool transpose_tall) {
  return newton_schulz_rounded(G, M, N, steps, set, eps, transpose_tall, false);
}

std::vector<double> muon_momentum_f64(const MuonHyper& h, const std::vector<double>& g,
                                      std::vector<double>& buf) {
  const size_t n = g.size();
  if (buf.empty()) buf.assign(n, 0.0);
  ASSAY_INPUT_CHECK(buf.size() == n, "muon: buf size");
  std::vector<double> upd(n);
  const double mu = h.momentum;
  for (size_t i = 0; i < n; ++i) {
    if (h.momentum_kind == MuonMomentum::keller) {
      buf[i] = buf[i] + (1.0 - mu) * (g[i] - buf[i]);
      upd[i] = h.nesterov ? g[i] + mu * (buf[i] - g[i]) : buf[i];
    } else {
      buf[i] = mu * buf[i] + g[i];
      upd[i] = h.nesterov ? g[i] + mu * buf[i] : buf[i];
    }
  }
  return upd;
}

std::vector<double> muon_step_f64(const MuonHyper& h, int64_t M, int64_t N,
                                  const std::vector<double>& g, std::vector<double>& p,
                                  std::vector<double>& buf) {
  const size_t n = static_cast<size_t>(M * N);
  ASSAY_INPUT_CHECK(g.size() == n && p.size() == n, "muon: sizes");
  const std::vector<double> upd = muon_momentum_f64(h, g, buf);
  std::vector<double> O = newton_schulz_f64(upd, M, N, h.ns_steps, h.coeffs, h.norm_eps);
  const double sc = muon_scale_factor(h.scale, M, N, h.extra_scale);
  for (size_t i = 0; i < n; ++i) {
    O[i] *= sc;
    p[i] = p[i] * (1.0 - h.lr * h.weight_decay) - h.lr * O[i];
  }
  return O;
}

std::vector<float> muon_step_bf16(const MuonHyper& h, int64_t M, int64_t N,
                                  const std::vector<float>& g, std::vector<float>& p,
                                  std::vector<float>& buf, bool bf16_ns) {
  const size_t n = static_cast<size_t>(M * N);
  ASSAY_INPUT_CHECK(g.size() == n && p.size() == n, "muon: sizes");
  if (buf.empty()) buf.assign(n, 0.0f);
  std::vector<float> upd(n);
  const float mu = f32(h.momentum), omu = f32(1.0 - h.momentum);
  for (size_t i = 0; i < n; ++i) {
    if (h.momentum_kind == MuonMomentum::keller) {
      buf[i] = lerp_f32(buf[i], g[i], omu);                   // momentum.lerp_(grad, 1 - beta)
      upd[i] = h.nesterov ? lerp_f32(g[i], buf[i], mu) : buf[i];  // grad.lerp_(momentum, beta)
    } else {
      buf[i] = buf[i] * mu + g[i];                            // buf.mul_(mu).add_(g)
      upd[i] = h.nesterov ? std::fma(mu, buf[i], g[i]) : buf[i];  // g.add(buf, alpha=mu)
    }
  }
  std::vector<float> O = bf16_ns ? newton_schulz_bf16(upd, M, N, h.ns_steps, h.coeffs, h.norm_eps)
                                 : newton_schulz_f32(upd, M, N, h.ns_steps, h.coeffs, h.norm_eps);
  const float sc = f32(muon_scale_factor(h.scale, M, N, h.extra_scale));
  const float dm = f32(1.0 - h.lr * h.weight_decay), nlr = f32(-h.lr);
  for (size_t i = 0; i < n; ++i) {
    O[i] = bf16_ns ? rb(O[i] * sc) : O[i] * sc;  // update *= scale on the bf16 (fp32) tensor
    p[i] = std::fma(nlr, O[i], p[i] * dm);
  }
  return O;
}

std::vector<double> newton_schulz_f64_eigen(const std::vector<double>& G, int64_t M, int64_t N,
                                            int steps, NsCoeffs set, double eps) {
  ASSAY_INPUT_CHECK(static_cast<int64_t>(G.size()) == M * N, "newton_schulz_eigen: G size");
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Mat X = Eigen::Map<const Mat>(G.data(), M, N);
  X /= (X.norm() + eps);
  for (int i = 0; i < steps; ++i) {
    double a, b, c;
    ns_coeffs(set, i, a, b, c);
    if (M <= N) {  // the smaller Gram matrix is X X^T: X <- (a I + b A + c A^2) X
      const Mat A = X * X.transpose();
      const Mat P = b * A + c * (A * A);
      X = a * X + P * X;
    } else {  // tall: X <- X (a I + b S + c S^2), S = X^T X (same polynomial, no transpose)
      const Mat S = X.transpose() * X;
      const Mat P = b * S + c * (S * S);
      X = a * X + X * P;
    }
  }
  std::vector<double> out(static_cast<size_t>(M * N));
  Eigen::Map<Mat>(out.data(), M, N) = X;
  return out;
}

}  // namespace assay::optim
