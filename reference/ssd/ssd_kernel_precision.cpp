// ssd::chunked_kernel_precision: the chunked form evaluated with the upstream kernels' roundings
// (fp32 arithmetic, io-dtype casts before the dot products, state-dtype chunk states). For
// tolerance calibration only; see ssd.h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/ssd/ssd.h"

namespace assay::ssd {

namespace {
float rnd(DType t, float v) { return static_cast<float>(round_to(t, static_cast<double>(v))); }
float f32(double v) { return static_cast<float>(v); }  // RNE double -> float
float sigmoidf(float v) { return 1.0f / (1.0f + std::exp(-v)); }
}  // namespace

Result chunked_kernel_precision(const Params& p, const Inputs& in, const KernelPrecision& kp) {
  validate(p, in);
  const int64_t B = in.batch, T = in.seqlen, H = in.nheads, P = in.headdim, G = in.ngroups,
                N = in.dstate, Q = p.chunk_size, NC = (T + Q - 1) / Q, PN = P * N, hpg = H / G;
  Result r;
  r.nchunks = NC;
  r.out.assign(B * T * H * P, 0.0);
  r.final_states.assign(B * H * PN, 0.0);
  r.chunk_states.assign(B * NC * H * PN, 0.0);
  // dt in fp32, kernel order.
  std::vector<float> delta(B * T * H);
  for (int64_t i = 0; i < B * T * H; ++i) {
    float d = f32(in.dt[i]);
    if (!in.dt_bias.empty()) d = d + f32(in.dt_bias[i % H]);
    if (p.dt_softplus && d <= 20.0f) d = std::log(std::exp(d) + 1.0f);
    d = std::min(std::max(d, f32(p.dt_min)), f32(p.dt_max));
    delta[i] = d;
  }
  r.dt_processed.assign(delta.begin(), delta.end());
  const bool d_per_p = static_cast<int64_t>(in.D.size()) == H * P;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H, g = h / hpg;
    const float A = f32(in.A[h]);
    std::vector<float> S(PN, 0.0f);  // fp32 state-passing accumulator
    if (!in.initial_states.empty())
      for (int64_t i = 0; i < PN; ++i) S[i] = f32(in.initial_states[bh * PN + i]);
    int64_t seq_prev = 0;
    auto seq = [&](int64_t t) { return in.seq_idx.empty() ? int64_t{0} : in.seq_idx[b * T + t]; };
    for (int64_t c = 0; c < NC; ++c) {
      const int64_t t0 = c * Q, Qc = std::min(Q, T - t0);
      // start state as chunk_scan reads it (state dtype), and as the golden intermediate.
      std::vector<float> Sio(PN);  // ... then cast to C's dtype (= io) before the dot with C
      for (int64_t i = 0; i < PN; ++i) {
        const float sst = rnd(kp.state, S[i]);
        r.chunk_states[((b * NC + c) * H + h) * PN + i] = sst;
        Sio[i] = rnd(kp.io, sst);
      }
      std::vector<float> dl(Qc), acum(Qc);
      float acc = 0.0f;
      for (int64_t l = 0; l < Qc; ++l) {
        dl[l] = delta[(b * T + t0 + l) * H + h];
        acc = acc + dl[l] * A;
        acum[l] = acc;
      }
      auto xv = [&](int64_t l, int64_t pp) { return f32(in.x[((b * T + t0 + l) * H + h) * P + pp]); };
      auto Bv = [&](int64_t l, int64_t n) { return f32(in.B[((b * T + t0 + l) * G + g) * N + n]); };
      auto Cv = [&](int64_t l, int64_t n) { return f32(in.C[((b * T + t0 + l) * G + g) * N + n]); };
      const int64_t seq_end = seq(t0 + Qc - 1);
      // chunk_scan: per token l.
      std::vector<float> w(Qc);
      for (int64_t l = 0; l < Qc; ++l) {
        const float sc_off = seq(t0 + l) == seq_prev ? std::exp(acum[l]) : 0.0f;
        for (int64_t s = 0; s <= l; ++s) {
          float cb = 0.0f;
          if (seq(t0 + l) == seq(t0 + s))
            for (int64_t n = 0; n < N; ++n) cb = cb + Cv(l, n) * Bv(s, n);
          w[s] = rnd(kp.io, cb * std::exp(std::min(acum[l] - acum[s], 0.0f)) * dl[s]);
        }
        for (int64_t pp = 0; pp < P; ++pp) {
          float off = 0.0f;
          for (int64_t n = 0; n < N; ++n) off = off + Cv(l, n) * Sio[pp * N + n];
          float y = off * sc_off;
          for (int64_t s = 0; s <= l; ++s) y = y + w[s] * xv(s, pp);
          const int64_t i = ((b * T + t0 + l) * H + h) * P + pp;
          if (!in.D.empty()) y = y + xv(l, pp) * f32(d_per_p ? in.D[h * P + pp] : in.D[h]);
          if (!in.z.empty()) {
            const float zz = f32(in.z[i]);
            y = y * (zz * sigmoidf(zz));
          }
          r.out[i] = rnd(kp.io, y);
        }
      }
      // chunk_state: B*scale cast to io dtype, fp32 accumulate.
      std::vector<float> st(PN, 0.0f);
      for (int64_t s = 0; s < Qc; ++s) {
        if (seq(t0 + s) != seq_end) continue;
        const float scale = std::exp(std::min(acum[Qc - 1] - acum[s], 0.0f)) * dl[s];
        for (int64_t pp = 0; pp < P; ++pp)
          for (int64_t n = 0; n < N; ++n) st[pp * N + n] = st[pp * N + n] + xv(s, pp) * rnd(kp.io, Bv(s, n) * scale);
      }
      // state passing, fp32.
      const float carry = seq_end == seq_prev ? std::exp(acum[Qc - 1]) : 0.0f;
      for (int64_t i = 0; i < PN; ++i) S[i] = carry * S[i] + st[i];
      seq_prev = seq_end;
    }
    for (int64_t i = 0; i < PN; ++i) r.final_states[bh * PN + i] = S[i];
  }
  return r;
}

}  // namespace assay::ssd
