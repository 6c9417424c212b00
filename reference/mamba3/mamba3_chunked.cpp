// Mamba-3 chunked form (the algorithm the SISO Triton kernel and the TileLang MIMO kernel run;
// spec 2.3 / 2.5), written with Eigen over (time x rank)-fused rows:
//   angles   chunk-local inclusive cumsum of pi tanh(A) DT plus the carried angle, mod 2pi per
//            chunk (angle_dt_fwd_kernel); in fp64 the sums are compensated, the carried state is
//            kept unreduced and each token's angle is reduced once (Cody-Waite, double-double 2pi),
//            so the angle error stays ~1e-15 rad for any Q and T;
//   scale_s  = gamma_s + (1 - lambda_{s+1}) DT_{s+1}, the shifted part 0 only at the END OF THE
//            SEQUENCE (it crosses chunk ends);
//   intra    y_i += sum_{time(j) < time(i)} exp(segsum(i, j)) scale_j (q_i . k_j) v_j   (strict on the
//            TIME index, all rank pairs);
//   diagonal y_i += gamma_t sum_r (q^_{t,r'} . k^_{t,r}) v_{t,r}  with the biased UNROTATED dot
//            product, as the kernels do (rotation is orthogonal and shared by q and k);
//   inter    y_l += exp(Acum_l) S_c q_l  (Acum inclusive);
//   state    S_{c+1} = exp(Acum_last) S_c + sum_j exp(segsum(last, j)) scale_j v_j k_j^T;
//   start    S_0 = H_init + (1 - lambda_0) DT_0 sum_r v_init,r k_init,r^T.
// segsum(i, j) = sum_{m=j+1..i} ADT_m is summed directly (the stable form), not as a difference of
// cumsums. The same core runs on absolute values for the error-bound magnitudes.
#include <cmath>
#include <vector>

#include <Eigen/Dense>

#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3::detail {

namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double sigmoid_t(double x) { return 0.5 * (1.0 + std::tanh(0.5 * x)); }
double silu_t(double x) {  // the TileLang kernel's form: 0.5x tanh(0.5x) + 0.5x
  const double hx = 0.5 * x;
  return hx * std::tanh(hx) + hx;
}
double bf(double x) { return round_to(DType::bf16, x); }
// Variant::bf16_kernel: a rounding point of the kernel, to its activation dtype pb.kernel_dtype.
double kr(const Problem& pb, double x) { return round_to(pb.kernel_dtype, x); }
void kr_inplace(const Problem& pb, Mat& m) { m = m.unaryExpr([&pb](double x) { return kr(pb, x); }); }

struct SeqData {
  int64_t len = 0;
  std::vector<double> adt, gam, scale;  // (len)
  Mat q, k, v;                          // (len*R, N), (len*R, N), (len*R, P): rotated q, k; v*Psi
  std::vector<double> qkdiag;           // (len, R, R): q^_{t,r'} . k^_{t,r} (biased, unrotated)
  double D = 0;
  bool abs_pass = false;  // the magnitude run ignores pb.variant
};

// Runs the chunked recurrence on one sequence/head. H (P x N) is the folded start state; on return
// it holds the final state. Y (len*R x P) receives the pre-gate output (SSM part + D v).
// chunk_states: if not null, start state of chunk c is written at chunk_states + c * cs_stride.
void chunk_core(const Problem& pb, const SeqData& sd, Mat& H, Mat& Y, double* chunk_states,
                int64_t cs_stride) {
  const int64_t R = pb.R, Qn = pb.chunk, len = sd.len;
  Y.setZero(len * R, pb.P);
  for (int64_t c0 = 0; c0 < len; c0 += Qn) {
    const int64_t L = std::min(Qn, len - c0);
    if (chunk_states) {
      Eigen::Map<Mat> cs(chunk_states + (c0 / Qn) * cs_stride, pb.P, pb.N);
      cs = H;
    }
    // seg(i, j) = sum_{m=j+1..i} adt (i >= j); acum(i) = sum_{m<=i} adt (inclusive).
    Mat seg = Mat::Zero(L, L);
    std::vector<double> acum(L);
    for (int64_t j = 0; j < L; ++j) {
      double s = 0;
      for (int64_t i = j + 1; i < L; ++i) {
        s += sd.adt[c0 + i];
        seg(i, j) = s;
      }
    }
    {
      double s = 0;
      for (int64_t i = 0; i < L; ++i) acum[i] = (s += sd.adt[c0 + i]);
    }
    const int64_t r0 = c0 * R, rows = L * R;
    const auto Qc = sd.q.middleRows(r0, rows);
    const auto Kc = sd.k.middleRows(r0, rows);
    const auto Vc = sd.v.middleRows(r0, rows);

    const Variant var = sd.abs_pass ? Variant::exact : pb.variant;
    if (var == Variant::no_state_passing && c0 > 0) H.setZero();  // nothing carried into chunk c > 0
    // Inter-chunk: exp(Acum_l) * S_c q_l.
    Mat Hq = H;
    if (var == Variant::bf16_kernel) kr_inplace(pb, Hq);
    Mat Yc = Qc * Hq.transpose();
    for (int64_t i = 0; i < rows; ++i) Yc.row(i) *= std::exp(acum[i / R]);
    // Intra-chunk, strictly below the diagonal on the time index.
    Mat Sm = Qc * Kc.transpose();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < rows; ++j) {
        const int64_t ti = i / R, tj = j / R;
        const bool below = var == Variant::row_mask ? i > j : ti > tj;
        Sm(i, j) = below ? Sm(i, j) * std::exp(seg(ti, tj)) * sd.scale[c0 + tj] : 0.0;
        if (var == Variant::bf16_kernel) Sm(i, j) = kr(pb, Sm(i, j));
      }
    if (var == Variant::no_intra) Sm.setZero();
    Yc.noalias() += Sm * Vc;
    // Same-step diagonal block (all R x R pairs) with gamma, and the D skip.
    for (int64_t tl = 0; tl < L; ++tl) {
      const int64_t t = c0 + tl;
      for (int64_t ro = 0; ro < R; ++ro) {
        for (int64_t ri = 0; ri < R; ++ri) {
          if (var == Variant::no_diag || (var == Variant::diag_same_rank_only && ri != ro)) continue;
          Yc.row(tl * R + ro) += (sd.gam[t] * sd.qkdiag[(t * R + ro) * R + ri]) * Vc.row(tl * R + ri);
        }
        Yc.row(tl * R + ro) += sd.D * Vc.row(tl * R + ro);
      }
    }
    Y.middleRows(r0, rows) = Yc;

    // State passing: S <- exp(Acum_last) S + sum_j exp(seg(last, j)) scale_j v_j k_j^T.
    Mat Vw = Vc;
    for (int64_t j = 0; j < rows; ++j) Vw.row(j) *= std::exp(seg(L - 1, j / R)) * sd.scale[c0 + j / R];
    if (var == Variant::bf16_kernel) kr_inplace(pb, Vw);
    const bool skip_decay = var == Variant::no_chunk_decay && (pb.variant_chunk < 0 || c0 / Qn + 1 == pb.variant_chunk);
    if (!skip_decay) H *= std::exp(acum[L - 1]);
    H.noalias() += Vw.transpose() * Kc;
  }
}

void run_one(const Problem& pb, int64_t n, int64_t h, Result& res) {
  const int64_t N = pb.N, P = pb.P, R = pb.R, S = pb.S;
  const int64_t b = pb.seq_row[n], t0 = pb.seq_start[n], len = pb.seq_len[n];
  const int64_t g = h / (pb.H / pb.G);
  const int64_t Qn = pb.chunk;

  // Pair maps.
  std::vector<int64_t> ia(S), ib(S);
  const bool adjacent = (pb.pairing == Pairing::adjacent) != (pb.variant == Variant::wrong_pairing);
  for (int64_t i = 0; i < S; ++i) {
    ia[i] = adjacent ? 2 * i : i;
    ib[i] = adjacent ? 2 * i + 1 : i + N / 2;
  }

  // Angles: chunk-local cumsum + carried state (angle_dt_fwd structure).
  std::vector<double> phi(len * S);
  // The carried angle is kept unreduced as the exact sum st_hi + st_lo (the kernel reduces it mod
  // 2pi after each chunk; mathematically the same, but per-chunk roundings would accumulate at
  // small Q). Each token's angle is reduced once, from carried state + chunk-local cumsum.
  std::vector<double> st_hi(S, 0.0), st_lo(S, 0.0), ang_mag(S, 0.0);
  if (pb.init_ssm)
    for (int64_t s = 0; s < S; ++s) st_hi[s] = pb.init_angle[pb.ist_angle(n, h) + s];
  for (int64_t s = 0; s < S; ++s) ang_mag[s] = std::fabs(st_hi[s]);
  for (int64_t c0 = 0; c0 < len; c0 += Qn) {
    const int64_t L = std::min(Qn, len - c0);
    // Chunk-local cumsum kept as an unevaluated sum cs + cl (compensated).
    std::vector<double> cs(S, 0.0), cl(S, 0.0), csa(S, 0.0);
    for (int64_t tl = 0; tl < L; ++tl) {
      const int64_t t = t0 + c0 + tl;
      const double dtv = pb.dt[pb.ibht(b, h, t)];
      for (int64_t s = 0; s < S; ++s) {
        const double th = std::tanh(pb.angles[pb.iang(b, t, h) + s]) * kPi * dtv;
        double sum, e;
        two_sum(cs[s], th, sum, e);
        cs[s] = sum;
        cl[s] += e;
        csa[s] += std::fabs(th);
        double hi, lo;
        two_sum(st_hi[s], cs[s], hi, lo);
        phi[(c0 + tl) * S + s] = reduce_2pi(hi, lo + cl[s] + st_lo[s]);
      }
    }
    for (int64_t s = 0; s < S; ++s) {
      double hi, lo;
      two_sum(st_hi[s], cs[s], hi, lo);
      st_hi[s] = hi;
      st_lo[s] += lo + cl[s];
      ang_mag[s] += csa[s];
    }
  }
  std::vector<double> ang_state(S);
  for (int64_t s = 0; s < S; ++s)
    ang_state[s] = len > 0 ? reduce_2pi(st_hi[s], st_lo[s]) : st_hi[s];  // empty: passes through
  if (pb.bf16_angles) {
    // Triton SISO angle path (angle_dt_fwd_kernel): fp32 increments pi*tanh(A)*DT, fp32 chunk-local
    // cumsum plus the fp32 carried state, mod 2pi (fused multiply-add, as Triton fuses), each token's
    // angle STORED in the Angles dtype (bf16) and read back by the SISO kernel for its rotation; the
    // state reduced mod 2pi after every chunk and returned in bf16. (tanh.approx is not emulated.)
    const float two_pi = static_cast<float>(kTwoPi), pi = static_cast<float>(kPi);
    auto mod2pi = [two_pi](float x) { return std::fma(-two_pi, std::floor(x / two_pi), x); };
    std::vector<float> st(S, 0.0f);
    if (pb.init_ssm)
      for (int64_t s = 0; s < S; ++s) st[s] = static_cast<float>(pb.init_angle[pb.ist_angle(n, h) + s]);
    for (int64_t c0 = 0; c0 < len; c0 += Qn) {
      const int64_t L = std::min(Qn, len - c0);
      std::vector<float> cs(S, 0.0f);
      for (int64_t tl = 0; tl < L; ++tl) {
        const int64_t t = t0 + c0 + tl;
        const float dtv = static_cast<float>(pb.dt[pb.ibht(b, h, t)]);
        for (int64_t s = 0; s < S; ++s) {
          const float th = static_cast<float>(std::tanh(static_cast<float>(pb.angles[pb.iang(b, t, h) + s]))) * pi;
          cs[s] += th * dtv;
          phi[(c0 + tl) * S + s] = bf(mod2pi(cs[s] + st[s]));
        }
      }
      for (int64_t s = 0; s < S; ++s) st[s] = mod2pi(st[s] + cs[s]);
    }
    for (int64_t s = 0; s < S; ++s) ang_state[s] = bf(st[s]);
  }

  SeqData sd, sa;  // values and absolute values
  sd.len = sa.len = len;
  sd.D = pb.d ? pb.d[h] : 0.0;
  sa.D = std::fabs(sd.D);
  sd.adt.resize(len);
  sd.gam.resize(len);
  sd.scale.resize(len);
  std::vector<double> lam(len), dts(len);
  for (int64_t tl = 0; tl < len; ++tl) {
    const int64_t t = t0 + tl;
    sd.adt[tl] = pb.adt[pb.ibht(b, h, t)];
    dts[tl] = pb.dt[pb.ibht(b, h, t)];
    lam[tl] = sigmoid_t(pb.trap[pb.ibht(b, h, t)]);
    if (pb.variant == Variant::double_sigmoid) lam[tl] = sigmoid_t(lam[tl]);
  }
  for (int64_t tl = 0; tl < len; ++tl) {
    sd.gam[tl] = dts[tl] * lam[tl];
    double shifted = tl + 1 < len ? dts[tl + 1] * (1.0 - lam[tl + 1]) : 0.0;
    if (pb.variant == Variant::shifted_reset_at_chunk && (tl + 1) % Qn == 0) shifted = 0.0;
    sd.scale[tl] = sd.gam[tl] + shifted;
  }
  sa.adt = sd.adt;
  sa.gam = sd.gam;
  sa.scale = sd.scale;

  // Biased q^, k^; diagonal dot products; rotation; v = V * Psi.
  Mat qh(len * R, N), kh(len * R, N);
  sd.v.resize(len * R, P);
  for (int64_t tl = 0; tl < len; ++tl)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t row = tl * R + r, t = t0 + tl;
      for (int64_t j = 0; j < N; ++j) {
        qh(row, j) = pb.q[pb.iqk(b, t, r, g) + j] + pb.q_bias[pb.ihr(h, r) * N + j];
        kh(row, j) = pb.k[pb.iqk(b, t, r, g) + j] + pb.k_bias[pb.ihr(h, r) * N + j];
      }
      for (int64_t p = 0; p < P; ++p)
        sd.v(row, p) = pb.v[pb.iv(b, t, h) + p] * (pb.psi ? pb.psi[pb.ihr(h, r) * P + p] : 1.0);
    }
  sd.qkdiag.assign(len * R * R, 0.0);
  for (int64_t tl = 0; tl < len; ++tl)
    for (int64_t ro = 0; ro < R; ++ro)
      for (int64_t ri = 0; ri < R; ++ri)
        sd.qkdiag[(tl * R + ro) * R + ri] = qh.row(tl * R + ro).dot(kh.row(tl * R + ri));
  sd.q = qh;
  sd.k = kh;
  for (int64_t row = 0; row < len * R; ++row) {
    const int64_t tl = row / R;
    for (int64_t i = 0; i < S; ++i) {
      const double c = std::cos(phi[tl * S + i]), s = std::sin(phi[tl * S + i]);
      const double qu = qh(row, ia[i]), qw = qh(row, ib[i]);
      sd.q(row, ia[i]) = c * qu - s * qw;
      sd.q(row, ib[i]) = s * qu + c * qw;
      const double ku = kh(row, ia[i]), kw = kh(row, ib[i]);
      sd.k(row, ia[i]) = c * ku - s * kw;
      sd.k(row, ib[i]) = s * ku + c * kw;
    }
  }
  if (pb.variant == Variant::bf16_kernel) {  // rotated q/k and Psi*V live in bf16 in the kernels
    kr_inplace(pb, sd.q);
    kr_inplace(pb, sd.k);
    kr_inplace(pb, sd.v);
    for (auto& x : sd.qkdiag) x = kr(pb, x);
  }
  sa.abs_pass = true;
  sa.q = sd.q.cwiseAbs();
  sa.k = sd.k.cwiseAbs();
  sa.v = sd.v.cwiseAbs();
  sa.qkdiag.assign(len * R * R, 0.0);
  for (int64_t tl = 0; tl < len; ++tl)
    for (int64_t ro = 0; ro < R; ++ro)
      for (int64_t ri = 0; ri < R; ++ri)
        sa.qkdiag[(tl * R + ro) * R + ri] = sa.q.row(tl * R + ro).dot(sa.k.row(tl * R + ri));

  // Folded start state.
  Mat Hs = Mat::Zero(P, N), Ha = Mat::Zero(P, N);
  if (pb.init_ssm) {
    for (int64_t p = 0; p < P; ++p)
      for (int64_t j = 0; j < N; ++j) {
        Hs(p, j) = pb.init_ssm[pb.ist_ssm(n, h) + p * N + j];
        Ha(p, j) = std::fabs(Hs(p, j));
      }
    if (len > 0) {
      const double w = (1.0 - lam[0]) * dts[0];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) {
          const double vi = pb.init_v[pb.ist_v(n, h) + p] * (pb.psi ? pb.psi[pb.ihr(h, r) * P + p] : 1.0);
          for (int64_t j = 0; j < N; ++j) {
            const double kv = vi * pb.init_k[pb.ist_k(n, r, h) + j];
            Hs(p, j) += w * kv;
            Ha(p, j) += w * std::fabs(kv);
          }
        }
    }
  }

  Mat Y, Ya;
  chunk_core(pb, sd, Hs, Y, len > 0 ? &res.chunk_states[pb.ichunk(pb.chunk_off[n], h)] : nullptr,
             pb.H * P * N);
  // The magnitude pass snapshots its folded start states too: chunk_states_bound.
  chunk_core(pb, sa, Ha, Ya, len > 0 ? &res.chunk_states_bound[pb.ichunk(pb.chunk_off[n], h)] : nullptr,
             pb.H * P * N);
  // The rotation-scale pass (final_ssm_rot_bound): the magnitude run with each rotated key element
  // replaced by its pair's |u| + |w| of the biased key, 0 outside the pairs, from a zero start (the
  // input K state is given rotated: no angle of the kernel's touches it).
  Mat Hg = Mat::Zero(P, N), Yg;
  {
    SeqData sg = sa;
    sg.k = Mat::Zero(len * R, N);
    for (int64_t row = 0; row < len * R; ++row)
      for (int64_t i = 0; i < S; ++i)
        sg.k(row, ia[i]) = sg.k(row, ib[i]) = std::fabs(kh(row, ia[i])) + std::fabs(kh(row, ib[i]));
    chunk_core(pb, sg, Hg, Yg, nullptr, 0);
  }

  for (int64_t row = 0; row < len * R; ++row)
    for (int64_t p = 0; p < P; ++p) res.out_pregate[pb.ipre(b, t0 + row / R, row % R, h) + p] = Y(row, p);

  // Gate factors F (len*R x P): rsqrt(mean y^2 + eps) * w * silu(z zeta), or silu(z zeta), or 1.
  Mat F = Mat::Ones(len * R, P);
  if (pb.fused_norm) {
    for (int64_t row = 0; row < len * R; ++row) {
      const double rs = 1.0 / std::sqrt(Y.row(row).squaredNorm() / static_cast<double>(P) + pb.norm_eps);
      F.row(row) *= rs;
      if (pb.norm_w)
        for (int64_t p = 0; p < P; ++p) F(row, p) *= pb.norm_w[h * P + p];
    }
  }
  if (pb.z) {
    for (int64_t row = 0; row < len * R; ++row) {
      const int64_t t = t0 + row / R, r = row % R;
      for (int64_t p = 0; p < P; ++p)
        F(row, p) *= silu_t(pb.z[pb.iv(b, t, h) + p] * (pb.zeta ? pb.zeta[pb.ihr(h, r) * P + p] : 1.0));
    }
  }
  Y = Y.cwiseProduct(F);
  Ya = Ya.cwiseProduct(F.cwiseAbs());
  if (pb.variant == Variant::bf16_kernel) kr_inplace(pb, Y);

  for (int64_t tl = 0; tl < len; ++tl) {
    const int64_t t = t0 + tl;
    if (pb.phi) {
      Eigen::Map<Eigen::VectorXd> o(&res.out[pb.iout(b, t, 0, h)], P);
      Eigen::Map<Eigen::VectorXd> oa(&res.out_bound[pb.iout(b, t, 0, h)], P);
      o.setZero();
      oa.setZero();
      for (int64_t r = 0; r < R; ++r) {
        Eigen::Map<const Eigen::VectorXd> ph(pb.phi + pb.ihr(h, r) * P, P);
        o += ph.cwiseProduct(Y.row(tl * R + r).transpose());
        oa += ph.cwiseAbs().cwiseProduct(Ya.row(tl * R + r).transpose());
      }
      if (pb.variant == Variant::bf16_kernel) o = o.unaryExpr([&pb](double x) { return kr(pb, x); });
    } else {
      for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) {
          res.out[pb.iout(b, t, r, h) + p] = Y(tl * R + r, p);  // (bf16-rounded above if emulated)
          res.out_bound[pb.iout(b, t, r, h) + p] = Ya(tl * R + r, p);
        }
    }
  }

  // Final states.
  for (int64_t s = 0; s < S; ++s) {
    res.final_angle[pb.ist_angle(n, h) + s] = ang_state[s];
    res.final_angle_bound[pb.ist_angle(n, h) + s] = ang_mag[s];
  }
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < N; ++j) {
      res.final_ssm[pb.ist_ssm(n, h) + p * N + j] = Hs(p, j);
      res.final_ssm_bound[pb.ist_ssm(n, h) + p * N + j] = Ha(p, j);
      res.final_ssm_rot_bound[pb.ist_ssm(n, h) + p * N + j] = Hg(p, j);
    }
  for (int64_t r = 0; r < R; ++r) {
    double* kf = &res.final_k[pb.ist_k(n, r, h)];
    double* kb = &res.final_k_bound[pb.ist_k(n, r, h)];
    if (len == 0) {
      for (int64_t j = 0; j < N; ++j) {
        kf[j] = pb.init_k ? pb.init_k[pb.ist_k(n, r, h) + j] : 0.0;
        kb[j] = std::fabs(kf[j]);
      }
      continue;
    }
    const int64_t row = (len - 1) * R + r;
    for (int64_t j = 0; j < N; ++j) {
      kf[j] = sd.k(row, j);
      kb[j] = std::fabs(kh(row, j));
    }
    for (int64_t i = 0; i < S; ++i)  // the pair's rotation scale |u| + |w| (mamba3.h)
      kb[ia[i]] = kb[ib[i]] = std::fabs(kh(row, ia[i])) + std::fabs(kh(row, ib[i]));
  }
  for (int64_t p = 0; p < P; ++p)
    res.final_v[pb.ist_v(n, h) + p] =
        len > 0 ? pb.v[pb.iv(b, t0 + len - 1, h) + p] : (pb.init_v ? pb.init_v[pb.ist_v(n, h) + p] : 0.0);
}

}  // namespace

Result run_chunked(const Problem& pb) { return run_per_head(pb, run_one); }

}  // namespace assay::mamba3::detail
