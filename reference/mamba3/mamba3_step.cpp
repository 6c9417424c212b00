// Mamba-3 step recurrence (the ground truth): one token at a time, scalar loops, exactly the update
// of mamba3_siso_step_ref / mamba3_MIMO_step_ref (spec 2.2, 2.5):
//   H_t = alpha_t H_{t-1} + beta_t sum_r v_{t-1,r} k_{t-1,r}^T + gamma_t sum_r v_{t,r} k_{t,r}^T,
//   y_{t,r} = H_t q_{t,r} + D v_{t,r}, then gate / norm / down-projection per token.
// The same recurrence is run a second time on absolute values for the error-bound magnitudes.
#include <cmath>
#include <vector>

#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3::detail {

namespace {

// Rotates x (length N) in place by the angles phi (length S), pairing as the problem says. If
// xa is given it receives the rounding-scale magnitude (|u| + |w| for both elements of a pair, |x|
// elsewhere), from x before the rotation.
void rotate_inplace(const Problem& pb, const std::vector<double>& phi, double* x, double* xa = nullptr) {
  if (xa) {
    for (int64_t j = 0; j < pb.N; ++j) xa[j] = std::fabs(x[j]);
    for (int64_t i = 0; i < pb.S; ++i) {
      int64_t a, b;
      pair_of(pb, i, a, b);
      xa[a] = xa[b] = std::fabs(x[a]) + std::fabs(x[b]);  // the pair's rotation scale (mamba3.h)
    }
  }
  rotate(pb, phi.data(), x);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x / (1.0 + std::exp(-x)); }

// One (sequence, head) of the recurrence.
void run_one(const Problem& pb, int64_t n, int64_t h, Result& res) {
  const int64_t N = pb.N, P = pb.P, R = pb.R, S = pb.S;
  const int64_t b = pb.seq_row[n], t0 = pb.seq_start[n], len = pb.seq_len[n];
  const int64_t g = h / (pb.H / pb.G);

  // Angle: the unreduced running sum kept exactly as acc_hi + acc_lo (compensated), reduced mod 2pi
  // at every step for use (phi), so reduction roundings do not accumulate over T.
  std::vector<double> phi(S, 0.0), phia(S, 0.0), acc_hi(S, 0.0), acc_lo(S, 0.0);
  std::vector<double> Hs(P * N, 0.0), Ha(P * N, 0.0);  // state and its magnitude
  std::vector<double> Hg(P * N, 0.0);                  // its rotation-scale magnitude (final_ssm_rot_bound)
  std::vector<double> kprev_g(R * N, 0.0);             // k_{t-1}'s rotation scale (0: the input K state)
  std::vector<double> kprev(R * N, 0.0);               // k_{t-1,r}, biased and rotated
  std::vector<double> kprev_a(R * N, 0.0);             // its rotation magnitude
  std::vector<double> vprev_raw(P, 0.0);               // V_{t-1} raw
  if (pb.init_ssm) {
    for (int64_t s = 0; s < S; ++s) {
      phi[s] = pb.init_angle[pb.ist_angle(n, h) + s];
      acc_hi[s] = phi[s];
      phia[s] = std::fabs(phi[s]);
    }
    for (int64_t i = 0; i < P * N; ++i) {
      Hs[i] = pb.init_ssm[pb.ist_ssm(n, h) + i];
      Ha[i] = std::fabs(Hs[i]);
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < N; ++j) {
        kprev[r * N + j] = pb.init_k[pb.ist_k(n, r, h) + j];
        kprev_a[r * N + j] = std::fabs(kprev[r * N + j]);
      }
    for (int64_t p = 0; p < P; ++p) vprev_raw[p] = pb.init_v[pb.ist_v(n, h) + p];
  }

  std::vector<double> q(R * N), k(R * N), ka(R * N), kg(R * N), v(R * P), vprev(R * P);
  std::vector<double> y(R * P), ya(R * P);
  const double Dh = pb.d ? pb.d[h] : 0.0;

  for (int64_t tl = 0; tl < len; ++tl) {
    const int64_t t = t0 + tl;
    const double dtv = pb.dt[pb.ibht(b, h, t)];
    const double adtv = pb.adt[pb.ibht(b, h, t)];
    const double trv = pb.trap[pb.ibht(b, h, t)];

    // 1-2. Angle update and reduction mod 2pi (exact sum, Cody-Waite reduction: mamba3_internal.h).
    for (int64_t s = 0; s < S; ++s) {
      const double th = kPi * std::tanh(pb.angles[pb.iang(b, t, h) + s]) * dtv;
      double sum, e;
      two_sum(acc_hi[s], th, sum, e);
      acc_hi[s] = sum;
      acc_lo[s] += e;
      phi[s] = reduce_2pi(acc_hi[s], acc_lo[s]);
      phia[s] += std::fabs(th);
    }
    // 3. Bias, then rotate.
    for (int64_t r = 0; r < R; ++r) {
      const double* Q = pb.q + pb.iqk(b, t, r, g);
      const double* K = pb.k + pb.iqk(b, t, r, g);
      for (int64_t j = 0; j < N; ++j) {
        q[r * N + j] = Q[j] + pb.q_bias[pb.ihr(h, r) * N + j];
        k[r * N + j] = K[j] + pb.k_bias[pb.ihr(h, r) * N + j];
      }
      rotate_inplace(pb, phi, &q[r * N]);
      rotate_inplace(pb, phi, &k[r * N], &ka[r * N]);
      for (int64_t j = 0; j < N; ++j) kg[r * N + j] = 0.0;
      for (int64_t i = 0; i < S; ++i) {
        int64_t ia, ib;
        pair_of(pb, i, ia, ib);
        kg[r * N + ia] = kg[r * N + ib] = ka[r * N + ia];  // |u| + |w| of the pair
      }
      for (int64_t p = 0; p < P; ++p) {
        const double ps = pb.psi ? pb.psi[pb.ihr(h, r) * P + p] : 1.0;
        v[r * P + p] = pb.v[pb.iv(b, t, h) + p] * ps;
        vprev[r * P + p] = vprev_raw[p] * ps;
      }
    }
    // 4. Coefficients.
    const double lam = sigmoid(trv);
    const double alpha = std::exp(adtv);
    const double beta = (1.0 - lam) * dtv * alpha;
    const double gamma = lam * dtv;

    // Chunk start: record the folded state H_{t-1} + (1 - lambda_t) DT_t sum_r v_{t-1} k_{t-1}^T,
    // and its magnitude, folded the same way from the magnitude state Ha (the final_ssm_bound
    // recurrence) with every factor in absolute value (w >= 0).
    if (tl % pb.chunk == 0) {
      const int64_t ic = pb.ichunk(pb.chunk_off[n] + tl / pb.chunk, h);
      double* cs = &res.chunk_states[ic];
      double* csa = &res.chunk_states_bound[ic];
      const double w = (1.0 - lam) * dtv;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0, acca = 0;
          for (int64_t r = 0; r < R; ++r) {
            acc += vprev[r * P + p] * kprev[r * N + j];
            acca += std::fabs(vprev[r * P + p] * kprev[r * N + j]);
          }
          cs[p * N + j] = Hs[p * N + j] + w * acc;
          csa[p * N + j] = Ha[p * N + j] + w * acca;
        }
    }

    // 5. State update (value and magnitude).
    for (int64_t p = 0; p < P; ++p)
      for (int64_t j = 0; j < N; ++j) {
        double prev = 0, cur = 0, preva = 0, cura = 0;
        for (int64_t r = 0; r < R; ++r) {
          prev += vprev[r * P + p] * kprev[r * N + j];
          cur += v[r * P + p] * k[r * N + j];
          preva += std::fabs(vprev[r * P + p] * kprev[r * N + j]);
          cura += std::fabs(v[r * P + p] * k[r * N + j]);
        }
        Hs[p * N + j] = alpha * Hs[p * N + j] + beta * prev + gamma * cur;
        Ha[p * N + j] = alpha * Ha[p * N + j] + beta * preva + gamma * cura;
        double prevg = 0, curg = 0;
        for (int64_t r = 0; r < R; ++r) {
          prevg += std::fabs(vprev[r * P + p]) * kprev_g[r * N + j];
          curg += std::fabs(v[r * P + p]) * kg[r * N + j];
        }
        Hg[p * N + j] = alpha * Hg[p * N + j] + beta * prevg + gamma * curg;
      }

    // 6. Output per rank, D skip.
    for (int64_t r = 0; r < R; ++r)
      for (int64_t p = 0; p < P; ++p) {
        double acc = 0, acca = 0;
        for (int64_t j = 0; j < N; ++j) {
          acc += Hs[p * N + j] * q[r * N + j];
          acca += Ha[p * N + j] * std::fabs(q[r * N + j]);
        }
        y[r * P + p] = acc + Dh * v[r * P + p];
        ya[r * P + p] = acca + std::fabs(Dh * v[r * P + p]);
      }

    for (int64_t r = 0; r < R; ++r)
      for (int64_t p = 0; p < P; ++p) res.out_pregate[pb.ipre(b, t, r, h) + p] = y[r * P + p];

    // Gate / fused norm, then down-projection.
    for (int64_t r = 0; r < R; ++r) {
      double rs = 1.0;
      if (pb.fused_norm) {
        double ms = 0;
        for (int64_t p = 0; p < P; ++p) ms += y[r * P + p] * y[r * P + p];
        rs = 1.0 / std::sqrt(ms / static_cast<double>(P) + pb.norm_eps);
      }
      for (int64_t p = 0; p < P; ++p) {
        double f = rs;
        if (pb.fused_norm && pb.norm_w) f *= pb.norm_w[h * P + p];
        if (pb.z) {
          double zz = pb.z[pb.iv(b, t, h) + p];
          if (pb.zeta) zz *= pb.zeta[pb.ihr(h, r) * P + p];
          f *= silu(zz);
        }
        y[r * P + p] *= f;
        ya[r * P + p] *= std::fabs(f);
      }
    }
    if (pb.phi) {
      double* o = &res.out[pb.iout(b, t, 0, h)];
      double* oa = &res.out_bound[pb.iout(b, t, 0, h)];
      for (int64_t p = 0; p < P; ++p) {
        double acc = 0, acca = 0;
        for (int64_t r = 0; r < R; ++r) {
          const double ph = pb.phi[pb.ihr(h, r) * P + p];
          acc += ph * y[r * P + p];
          acca += std::fabs(ph) * ya[r * P + p];
        }
        o[p] = acc;
        oa[p] = acca;
      }
    } else {
      for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) {
          res.out[pb.iout(b, t, r, h) + p] = y[r * P + p];
          res.out_bound[pb.iout(b, t, r, h) + p] = ya[r * P + p];
        }
    }

    // 7. Carry k and raw V to the next step.
    kprev = k;
    kprev_a = ka;
    kprev_g = kg;
    for (int64_t p = 0; p < P; ++p) vprev_raw[p] = pb.v[pb.iv(b, t, h) + p];
  }

  for (int64_t s = 0; s < S; ++s) {
    res.final_angle[pb.ist_angle(n, h) + s] = phi[s];
    res.final_angle_bound[pb.ist_angle(n, h) + s] = phia[s];
  }
  for (int64_t i = 0; i < P * N; ++i) {
    res.final_ssm[pb.ist_ssm(n, h) + i] = Hs[i];
    res.final_ssm_bound[pb.ist_ssm(n, h) + i] = Ha[i];
    res.final_ssm_rot_bound[pb.ist_ssm(n, h) + i] = Hg[i];
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < N; ++j) {
      res.final_k[pb.ist_k(n, r, h) + j] = kprev[r * N + j];
      res.final_k_bound[pb.ist_k(n, r, h) + j] = kprev_a[r * N + j];
    }
  for (int64_t p = 0; p < P; ++p) res.final_v[pb.ist_v(n, h) + p] = vprev_raw[p];
}

}  // namespace

Result run_step(const Problem& pb) { return run_per_head(pb, run_one); }

}  // namespace assay::mamba3::detail
