// ssd::chunked_kernel_precision: the chunked form evaluated with the upstream kernels' roundings
// (fp32 arithmetic, io-dtype casts before the dot products, state-dtype chunk states). For
// tolerance calibration only; see ssd.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/ssd/ssd.h"

namespace assay::ssd {

namespace {
float rnd(DType t, float v) { return static_cast<float>(round_to(t, static_cast<double>(v))); }
float f32(double v) { return static_cast<float>(v); }  // RNE double -> float
float sigmoidf(float v) { return 1.0f / (1.0f + std::exp(-v)); }
}  // namespace

double round_tf32(double x) {
  // Round the fp32 value to 10 explicit mantissa bits (RNE) by clearing the low 13 bits.
  const float f = static_cast<float>(x);
  if (!std::isfinite(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t lsb = (u >> 13) & 1u;
  u += 0x0FFFu + lsb;
  u &= ~0x1FFFu;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

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
  // A dot operand as the tensor core reads it: TF32 with allow_tf32, else the fp32 value itself.
  auto dop = [&](float v) { return kp.tf32_dots ? static_cast<float>(round_tf32(v)) : v; };
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
            for (int64_t n = 0; n < N; ++n) cb = cb + dop(Cv(l, n)) * dop(Bv(s, n));
          w[s] = rnd(kp.io, cb * std::exp(std::min(acum[l] - acum[s], 0.0f)) * dl[s]);
        }
        for (int64_t pp = 0; pp < P; ++pp) {
          float off = 0.0f;
          for (int64_t n = 0; n < N; ++n) off = off + dop(Cv(l, n)) * dop(Sio[pp * N + n]);
          float y = off * sc_off;
          for (int64_t s = 0; s <= l; ++s) y = y + dop(w[s]) * dop(xv(s, pp));
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
          for (int64_t n = 0; n < N; ++n) st[pp * N + n] = st[pp * N + n] + dop(xv(s, pp)) * dop(rnd(kp.io, Bv(s, n) * scale));
      }
      // state passing, fp32.
      const float carry = seq_end == seq_prev ? std::exp(acum[Qc - 1]) : 0.0f;
      for (int64_t i = 0; i < PN; ++i) S[i] = carry * S[i] + st[i];
      seq_prev = seq_end;
    }
    for (int64_t i = 0; i < PN; ++i) r.final_states[bh * PN + i] = S[i];
  }
  // chunk_state_varlen (B == 1): sequence n = [st, e) ends in chunk c = (e-1)/Q; chunk-local sum
  // from max(st, cQ) with B*scale cast to io, plus exp(Acum_{e-1}) * the stored start state of
  // chunk c when the sequence began before it (or, for sequence 0 with initial_states ending in
  // chunk 0, the initial state: the golden's math, see recurrence()).
  if (!in.cu_seqlens.empty()) {
    const int64_t S = static_cast<int64_t>(in.cu_seqlens.size()) - 1;
    r.varlen_states.assign(S * H * PN, 0.0);
    for (int64_t n = 0; n < S; ++n) {
      const int64_t st = in.cu_seqlens[n], e = in.cu_seqlens[n + 1];
      if (e <= st) continue;
      const int64_t c = (e - 1) / Q, t0 = c * Q;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / hpg;
        const float A = f32(in.A[h]);
        std::vector<float> acum(e - t0);
        float acc = 0.0f;
        for (int64_t t = t0; t < e; ++t) acum[t - t0] = acc = acc + delta[t * H + h] * A;
        const float last = acum[e - 1 - t0];
        std::vector<float> v(PN, 0.0f);
        for (int64_t t = std::max(st, t0); t < e; ++t) {
          const float scale = std::exp(std::min(last - acum[t - t0], 0.0f)) * delta[t * H + h];
          for (int64_t pp = 0; pp < P; ++pp)
            for (int64_t nn = 0; nn < N; ++nn)
              v[pp * N + nn] = v[pp * N + nn] + dop(f32(in.x[(t * H + h) * P + pp])) *
                                                     dop(rnd(kp.io, f32(in.B[(t * G + g) * N + nn]) * scale));
        }
        const bool carry = st < t0 || (n == 0 && st == 0 && !in.initial_states.empty());
        if (carry) {
          const float dec = std::exp(std::min(last, 0.0f));
          for (int64_t i = 0; i < PN; ++i)
            v[i] = v[i] + dec * static_cast<float>(r.chunk_states[(c * H + h) * PN + i]);
        }
        for (int64_t i = 0; i < PN; ++i) r.varlen_states[(n * H + h) * PN + i] = v[i];
      }
    }
  }
  return r;
}

}  // namespace assay::ssd
