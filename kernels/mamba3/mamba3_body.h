// kernels/mamba3/mamba3_body.h: the block body of the Mamba-3 chunked forward (SISO = rank 1), one
// (sequence, head) per CTA. Written as block-stride loops separated by barriers, so the same code
// compiles for the GPU (mamba3_fwd.cu: tid = threadIdx.x, nth = blockDim.x, sync = __syncthreads)
// and for the host (a CPU transcription: tid = 0, nth = 1, sync = nothing), which computes the
// same fp32 values element by element (each element is produced by one thread in a fixed order).
//
// Tensors: those of kernels/mamba3/mamba3.h. Arithmetic: fp32 throughout (no tensor cores); the
// only roundings to a narrower type are the stores of out, final_k (MIMO), final_v (a copy) and
// chunk_states (SISO bf16).
//
// Per chunk of Lc <= L tokens (rows i = (t, r) of the flattened [L*R, N] view, i = t * R + r):
//   A  chunk_states[c] = S (the folded start state); per-token adt, dt, gamma = lam dt,
//      shf[t] = (1 - lam_t) dt_t (shf[Lc] = the next token's, 0 at the sequence end); V tile
//   B  angles phi_t = (phi_{t-1} + pi tanh(Angles_t) DT_t) mod 2pi (one sequential scan per angle
//      dim, fp32); decay Dm[t][s] = exp(sum_{u=s+1..t} adt_u) (segment sums built directly),
//      ein[t] = exp(sum_{u<=t} adt_u)
//   C  wl[s] = Dm[Lc-1][s] (gamma_s + shf[s+1] if s < Lc-1): token s's weight in the chunk-end
//      state; q, k = Rot(phi_t)(X + bias) staged into the flattened view qs / ks [L*R, N]
//   D  Gm[i][j] = (q_i . k_j) Dm[t_i][t_j] (gamma_{t_j} + shf[t_j + 1] if t_j < t_i), t_j <= t_i
//      (the qk_dot_shared product over the flattened rows, every rank pair)
//   E  y_i[p] = ein[t_i] (S q_i)[p] + sum_j Gm[i][j] v_j[p] + D v_i[p]   (v_j = V_{t_j} Psi_{r_j})
//   F  fused norm: rs_i = rsqrt(mean_p y_i^2 + eps)
//   G  out (gate, norm, Phi); S = ein[Lc-1] S + sum_j wl[t_j] v_j k_j^T, plus, when the sequence
//      goes on, the next token's shifted term shf[Lc] sum_r v_{Lc-1,r} k_{Lc-1,r}^T (the fold)
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/mamba3/mamba3.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define M3_HD __host__ __device__ __forceinline__
#else
#define M3_HD inline
#endif

namespace assay::kernels::mamba3 {

M3_HD float bf16_bits_to_f(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
M3_HD uint16_t f_to_bf16_bits(float f) {  // round to nearest even (NaN kept quiet)
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return static_cast<uint16_t>((u >> 16) | ((u & 0xffffu) ? 0x40u : 0u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
M3_HD float bf16_round(float f) { return bf16_bits_to_f(f_to_bf16_bits(f)); }

M3_HD float f16_bits_to_f(uint16_t b) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(b));
#else
  _Float16 h;
  memcpy(&h, &b, 2);
  return static_cast<float>(h);
#endif
}
M3_HD uint16_t f_to_f16_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
#endif
}

M3_HD float ld(const Ten& x, int64_t i) {
  switch (x.t) {
    case Elt::bf16: return bf16_bits_to_f(static_cast<const uint16_t*>(x.p)[i]);
    case Elt::f16: return f16_bits_to_f(static_cast<const uint16_t*>(x.p)[i]);
    default: return static_cast<const float*>(x.p)[i];
  }
}
M3_HD void st(const Ten& x, int64_t i, float v) {
  switch (x.t) {
    case Elt::bf16: static_cast<uint16_t*>(const_cast<void*>(x.p))[i] = f_to_bf16_bits(v); break;
    case Elt::f16: static_cast<uint16_t*>(const_cast<void*>(x.p))[i] = f_to_f16_bits(v); break;
    default: static_cast<float*>(const_cast<void*>(x.p))[i] = v; break;
  }
}

M3_HD float m3_exp(float x) { return expf(x); }
M3_HD float m3_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// The rotation partner of dim n: -1 when n is not rotated; else the partner's index, the pair's
// angle index and whether n is the first element (u) of the pair (u, w).
M3_HD int rot_partner(int n, int N, int S, bool half, int& ai, bool& first) {
  if (half) {
    const int h2 = N / 2;
    if (n < h2) {
      if (n >= S) return -1;
      ai = n, first = true;
      return n + h2;
    }
    if (n - h2 >= S) return -1;
    ai = n - h2, first = false;
    return n - h2;
  }
  if (n / 2 >= S) return -1;
  ai = n / 2, first = (n % 2) == 0;
  return n ^ 1;
}

template <class Sync>
M3_HD void mamba3_block(const Params& p, int seq, int h, float* sm, int tid, int nth, Sync sync) {
  const int N = p.N, P = p.P, R = p.R, L = p.L, S = p.S, M = L * R, H = p.H, T = p.T;
  float* Sst = sm;             // [P, N] fp32 running state (folded convention)
  float* qs = Sst + P * N;     // [L*R, N] flattened view of the [chunk, rank, N] q tile
  float* ks = qs + M * N;      // [L*R, N] likewise k
  float* vs = ks + M * N;      // [L, P] raw V
  float* Gm = vs + L * P;      // [M, M] masked, weighted scores
  float* ys = Gm + M * M;      // [M, P] pre-gate y
  float* Dm = ys + M * P;      // [L, L] intra-chunk decay
  float* ein = Dm + L * L;     // [L]
  float* wl = ein + L;         // [L]
  float* gam = wl + L;         // [L]
  float* dts = gam + L;        // [L]
  float* adts = dts + L;       // [L]
  float* shf = adts + L;       // [L + 1]
  float* phs = shf + L + 1;    // [L, S] per-token angle (as stored)
  float* phc = phs + L * S;    // [S] carried angle
  float* rs = phc + S;         // [M] norm factors
  const Mutation mut = static_cast<Mutation>(p.mut);
  const float kPi = 3.14159265358979f, kTwoPi = 6.28318530717959f;

  int64_t b, start, len, cbase = 0;
  if (p.cu) {
    b = 0, start = p.cu[seq], len = p.cu[seq + 1] - p.cu[seq];
    for (int i = 0; i < seq; ++i) cbase += (p.cu[i + 1] - p.cu[i] + L - 1) / L;
  } else {
    b = seq, start = 0, len = T;
    cbase = static_cast<int64_t>(seq) * ((T + L - 1) / L);
  }
  const int64_t row0 = static_cast<int64_t>(b) * T + start;  // [B*T] row of the sequence's token 0
  const int64_t bh0 = (static_cast<int64_t>(b) * H + h) * T + start;  // [B, H, T] index of token 0
  const int g = h / (H / p.G);
  const bool has_st = p.ssm_state.p != nullptr;
  auto psi = [&](int r, int pp) -> float { return p.mimo ? ld(p.psi, (static_cast<int64_t>(h) * R + r) * P + pp) : 1.f; };

  // Initial state S_0 = H_init + (1 - lam_0) DT_0 sum_r (V_state Psi_r) k_state_r^T; angle carry.
  for (int s = tid; s < S; s += nth) phc[s] = has_st ? ld(p.angle_state, (static_cast<int64_t>(seq) * H + h) * S + s) : 0.f;
  {
    float sh0 = 0.f;
    if (len > 0) sh0 = (1.f - m3_sigmoid(ld(p.trap, bh0))) * ld(p.dt, bh0);
    for (int e = tid; e < P * N; e += nth) {
      const int pp = e / N, n = e % N;
      float v = 0.f;
      if (has_st) {
        v = ld(p.ssm_state, (static_cast<int64_t>(seq) * H + h) * P * N + e);
        if (len > 0) {
          const float vst = ld(p.v_state, (static_cast<int64_t>(seq) * H + h) * P + pp);
          float acc = 0.f;
          for (int r = 0; r < R; ++r) {
            const int64_t ki = p.mimo ? ((static_cast<int64_t>(seq) * R + r) * H + h) * N + n : (static_cast<int64_t>(seq) * H + h) * N + n;
            acc += vst * psi(r, pp) * ld(p.k_state, ki);
          }
          v += sh0 * acc;
        }
      }
      Sst[e] = v;
    }
  }
  sync();

  const int64_t nch = (len + L - 1) / L;
  int Lc = 0;
  for (int64_t c = 0; c < nch; ++c) {
    const int64_t t0 = c * L;
    Lc = static_cast<int>(len - t0 < L ? len - t0 : L);
    const bool last = c == nch - 1;
    // ---- A: chunk start state, per-token scalars, V tile
    if (p.chunk_states.p)
      for (int e = tid; e < P * N; e += nth) st(p.chunk_states, ((cbase + c) * H + h) * P * N + e, Sst[e]);
    for (int t = tid; t <= L; t += nth) {
      float a = 0.f, d = 0.f, gm = 0.f, sf = 0.f;
      if (t < Lc) {
        const int64_t bi = bh0 + t0 + t;
        a = ld(p.adt, bi), d = ld(p.dt, bi);
        const float lam = m3_sigmoid(ld(p.trap, bi));
        gm = lam * d, sf = (1.f - lam) * d;
      } else if (t == Lc && t0 + Lc < len) {
        const int64_t bi = bh0 + t0 + t;
        sf = (1.f - m3_sigmoid(ld(p.trap, bi))) * ld(p.dt, bi);
      }
      if (t < L) adts[t] = a, dts[t] = d, gam[t] = gm;
      shf[t] = sf;
    }
    for (int e = tid; e < L * P; e += nth) {
      const int t = e / P, pp = e % P;
      vs[e] = t < Lc ? ld(p.v, ((row0 + t0 + t) * H + h) * P + pp) : 0.f;
    }
    sync();
    // ---- B: angles (sequential per angle dim), decays
    for (int s = tid; s < S; s += nth) {
      float ph = phc[s];
      for (int t = 0; t < Lc; ++t) {
        const float th = kPi * tanhf(ld(p.angles, ((row0 + t0 + t) * H + h) * S + s)) * dts[t];
        ph += th;
        if (ph >= kTwoPi) ph -= kTwoPi;
        if (ph < 0.f) ph += kTwoPi;
        phs[t * S + s] = mut == Mutation::angle_bf16 ? bf16_round(ph) : ph;
      }
      phc[s] = ph;
    }
    for (int t = tid; t < Lc; t += nth) {
      float acc = 0.f;  // sum_{u=s+1..t} adt_u
      for (int s = t; s >= 0; --s) {
        Dm[t * L + s] = m3_exp(acc);
        acc += adts[s];
      }
      ein[t] = m3_exp(acc);
    }
    sync();
    // ---- C: chunk-end weights; rotated q, k into the flattened [L*R, N] view
    for (int s = tid; s < Lc; s += nth) wl[s] = Dm[(Lc - 1) * L + s] * (gam[s] + (s < Lc - 1 ? shf[s + 1] : 0.f));
    for (int e = tid; e < M * N; e += nth) {
      const int n = e % N, tr = e / N, t = tr / R, r = tr % R;
      // The layout contract: (token t, rank r) lives at row t * R + r. The mutant writes r * L + t.
      const int row = mut == Mutation::flat_view_swapped ? r * L + t : t * R + r;
      float qv = 0.f, kv = 0.f;
      if (t < Lc) {
        const int64_t base = (((row0 + t0 + t) * R + r) * p.G + g) * N;
        const int64_t bbase = (static_cast<int64_t>(h) * R + r) * N;
        const float qu = ld(p.q, base + n) + ld(p.q_bias, bbase + n);
        const float ku = ld(p.k, base + n) + ld(p.k_bias, bbase + n);
        int ai = 0;
        bool first = true;
        const int m = rot_partner(n, N, S, p.half_split, ai, first);
        if (m < 0) {
          qv = qu, kv = ku;
        } else {
          const float qw = ld(p.q, base + m) + ld(p.q_bias, bbase + m);
          const float kw = ld(p.k, base + m) + ld(p.k_bias, bbase + m);
          float sn, cs;
          sincosf(phs[t * S + ai], &sn, &cs);
          // (u, w) -> (u cos - w sin, u sin + w cos); own = u (first) or w.
          qv = first ? qu * cs - qw * sn : qw * sn + qu * cs;
          kv = first ? ku * cs - kw * sn : kw * sn + ku * cs;
        }
      }
      qs[row * N + n] = qv;
      ks[row * N + n] = kv;
    }
    sync();
    // ---- D: the QK^T-like product over the flattened rows (qk_dot_shared), masked and weighted
    for (int e = tid; e < M * M; e += nth) {
      const int i = e / M, j = e % M, ti = i / R, tj = j / R;
      float gv = 0.f;
      if (ti < Lc && tj <= ti) {
        float dot = 0.f;
        for (int n = 0; n < N; ++n) dot += qs[i * N + n] * ks[j * N + n];
        gv = dot * (Dm[ti * L + tj] * (gam[tj] + (tj < ti ? shf[tj + 1] : 0.f)));
      }
      Gm[e] = gv;
    }
    sync();
    // ---- E: y = inter (carried state) + intra (scores) + D skip
    for (int e = tid; e < M * P; e += nth) {
      const int i = e / P, pp = e % P, ti = i / R, ri = i % R;
      float y = 0.f;
      if (ti < Lc) {
        float acc = 0.f;
        for (int n = 0; n < N; ++n) acc += Sst[pp * N + n] * qs[i * N + n];
        y = ein[ti] * acc;
        for (int j = 0; j < (ti + 1) * R; ++j) y += Gm[i * M + j] * (vs[(j / R) * P + pp] * psi(j % R, pp));
        if (p.d.p) y += ld(p.d, h) * (vs[ti * P + pp] * psi(ri, pp));
      }
      ys[e] = y;
    }
    sync();
    // ---- F: fused pre-gate RMSNorm factors
    if (p.fused_norm) {
      for (int i = tid; i < M; i += nth) {
        float s2 = 0.f;
        for (int pp = 0; pp < P; ++pp) s2 += ys[i * P + pp] * ys[i * P + pp];
        rs[i] = 1.f / sqrtf(s2 / static_cast<float>(P) + p.eps);
      }
      sync();
    }
    // ---- G: outputs; state passing
    for (int e = tid; e < Lc * P; e += nth) {
      const int t = e / P, pp = e % P;
      const int64_t rowg = row0 + t0 + t;
      const float zt = p.z.p ? ld(p.z, (rowg * H + h) * P + pp) : 0.f;
      float o = 0.f;
      for (int r = 0; r < R; ++r) {
        const int i = t * R + r;
        float v = ys[i * P + pp];
        if (p.fused_norm) v *= rs[i] * (p.norm_w.p ? ld(p.norm_w, static_cast<int64_t>(h) * P + pp) : 1.f);
        if (p.z.p) {
          const float zz = p.mimo ? zt * ld(p.zeta, (static_cast<int64_t>(h) * R + r) * P + pp) : zt;
          v *= zz * m3_sigmoid(zz);
        }
        if (p.phi.p)
          o += ld(p.phi, (static_cast<int64_t>(h) * R + r) * P + pp) * v;
        else
          st(p.out, ((rowg * R + r) * H + h) * P + pp, v);
      }
      if (p.phi.p) st(p.out, (rowg * H + h) * P + pp, o);
    }
    const bool update = !(mut == Mutation::first_chunk_state && !last);
    const float etot = mut == Mutation::no_chunk_decay ? 1.f : ein[Lc - 1];
    if (update)
      for (int e = tid; e < P * N; e += nth) {
        const int pp = e / N, n = e % N;
        float acc = 0.f;
        for (int j = 0; j < Lc * R; ++j) acc += wl[j / R] * (vs[(j / R) * P + pp] * psi(j % R, pp)) * ks[j * N + n];
        float sn = etot * Sst[e] + acc;
        if (!last) {
          float a2 = 0.f;
          for (int r = 0; r < R; ++r) a2 += (vs[(Lc - 1) * P + pp] * psi(r, pp)) * ks[((Lc - 1) * R + r) * N + n];
          sn += shf[Lc] * a2;
        }
        Sst[e] = sn;
      }
    sync();
  }

  // ---- Final states (an empty sequence passes its input states through, or zeros).
  const int64_t sh = static_cast<int64_t>(seq) * H + h;
  for (int e = tid; e < P * N; e += nth) st(p.final_ssm, sh * P * N + e, Sst[e]);
  for (int s = tid; s < S; s += nth) st(p.final_angle, sh * S + s, len > 0 ? phs[(Lc - 1) * S + s] : phc[s]);
  for (int e = tid; e < R * N; e += nth) {
    const int r = e / N, n = e % N;
    const int64_t ki = p.mimo ? ((static_cast<int64_t>(seq) * R + r) * H + h) * N + n : sh * N + n;
    float v = 0.f;
    if (len > 0)
      v = ks[((Lc - 1) * R + r) * N + n];
    else if (has_st)
      v = ld(p.k_state, ki);
    st(p.final_k, ki, v);
  }
  for (int pp = tid; pp < P; pp += nth) {
    float v = 0.f;
    if (len > 0)
      v = ld(p.v, ((row0 + len - 1) * H + h) * P + pp);
    else if (mut == Mutation::varlen_empty_prev && row0 > 0)
      v = ld(p.v, ((row0 - 1) * H + h) * P + pp);  // the previous sequence's last V (upstream's defect)
    else if (has_st)
      v = ld(p.v_state, sh * P + pp);
    st(p.final_v, sh * P + pp, v);
  }
}

}  // namespace assay::kernels::mamba3
