// Internal to kernels/attention (included through attention_fwd.h by attention_fwd.cu and
// attention_decode.cu only): the shared-memory tile loads and the KV mainloop with its online-softmax step, shared by the prefill
// and decode kernels (attention_fwd_kernels.cuh).
//
// Tensors: as attention_fwd.h (q, k, v bf16|fp16 in their dense / varlen / packed / paged layouts,
// sink fp32 [Hq]); here they are read into shared-memory tiles of the padded head dim DP, scores
// and the O accumulator are fp32 registers (m16n8 C-fragment layout). Convention: FlashAttention
// (reference/attention/attention.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_params.h"
#include "kernels/common/mma_sync.cuh"

namespace assay::kernels::attention::fwd {

using namespace assay::kernels::mma;  // cp.async, ldmatrix, mma.sync m16n8k16, Ty<T>

constexpr int BN = 64;  // keys per KV tile (shared memory)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int DP>
struct Cfg {
  // Query rows per CTA (16 per warp). Measured on H100 (B=2, H=16, S=4096, D=128): 128 rows
  // (8 warps, 1 CTA/SM) 165 / 142 TFLOP/s non-causal / causal; 64 rows (4 warps, 2 CTAs/SM, Q
  // fragments in registers) 149 / 130.
  static constexpr int BM = DP >= 256 ? 64 : 128;
  static constexpr int NW = BM / 16;
  static constexpr int NT = NW * 32;
  static constexpr int LD = DP + 8;  // shared row stride in elements: +16 B keeps ldmatrix conflict-free
  static constexpr int SMEM = (BM + 4 * BN) * LD * 2;  // Q + 2 stages of K and V
};

struct Flags {
  int packed;   // rows of a CTA = packed (query, head-of-group) pairs of one KV head
  int partial;  // write fp32 split partials (grid.z = num_splits) instead of O / LSE
  int vec16;    // 16-byte cp.async loads (D, Dv multiples of 8, aligned pointers)
};

// One query row of a CTA: sequence row i, query head h; valid = inside the sequence.
struct RowMap {
  int i, h;
  bool valid;
};
__device__ __forceinline__ RowMap map_row(int gr, int rows_total, int packed, int G, int hk, int hfix) {
  RowMap m;
  m.valid = gr < rows_total;
  if (packed) {
    m.i = gr / G;
    m.h = hk * G + gr % G;
  } else {
    m.i = gr;
    m.h = hfix;
  }
  return m;
}

// Shared-memory tile loads, common to the prefill and decode kernels. Row stride LD elements,
// DP = D padded to the tile; columns past D (Dv) and rows outside the sequence / key range are
// zero-filled, so every MMA reads defined values. vec16: 16-byte cp.async chunks (D, Dv % 8 == 0
// and aligned bases), else one element per thread.
//
// Q rows [0, NROWS): CTA row r is query row row0 + r through map_row.
template <int NROWS, int DP, int LD, int NT>
__device__ __forceinline__ void load_q_tile(uint16_t* sQ, const uint16_t* __restrict__ gq, const AttnParams& p,
                                            bool vec16, int tid, int row0, int rows_total, int packed, int G,
                                            int hk, int hfix, int qs) {
  constexpr int CPR = DP / 8;
  const int D = p.D;
  if (vec16) {
    for (int c = tid; c < NROWS * CPR; c += NT) {
      const int r = c / CPR, col = (c % CPR) * 8;
      const RowMap m = map_row(row0 + r, rows_total, packed, G, hk, hfix);
      const bool ok = m.valid && col < D;
      const uint16_t* src = ok ? gq + (static_cast<int64_t>(qs + m.i) * p.Hq + m.h) * D + col : gq;
      cp_async16(sQ + r * LD + col, src, ok ? 16 : 0);
    }
  } else {
    for (int e = tid; e < NROWS * DP; e += NT) {
      const int r = e / DP, col = e % DP;
      const RowMap m = map_row(row0 + r, rows_total, packed, G, hk, hfix);
      uint16_t x = 0;
      if (m.valid && col < D) x = gq[(static_cast<int64_t>(qs + m.i) * p.Hq + m.h) * D + col];
      sQ[r * LD + col] = x;
    }
  }
}
// K and V rows [0, BN) of one tile: key kt + r of sequence b, KV head hk; keys past hi are zero
// rows.
template <int DP, int LD, int NT>
__device__ __forceinline__ void load_kv_tile(uint16_t* dK, uint16_t* dV, const uint16_t* __restrict__ gk,
                                             const uint16_t* __restrict__ gv, const AttnParams& p, bool vec16,
                                             int tid, int b, int hk, int kt, int hi) {
  constexpr int CPR = DP / 8;
  const int D = p.D, Dv = p.Dv;
  if (vec16) {
#pragma unroll
    for (int it = 0; it < (BN * CPR + NT - 1) / NT; ++it) {
      const int c = tid + it * NT;
      if (BN * CPR % NT == 0 || c < BN * CPR) {
        const int r = c / CPR, col = (c % CPR) * 8;
        const int j = kt + r;
        const bool ok = j <= hi;
        const int64_t tok = ok ? kv_token_index(p, b, j) : 0;
        const bool okk = ok && col < D, okv = ok && col < Dv;
        cp_async16(dK + r * LD + col, okk ? gk + (tok * p.Hkv + hk) * D + col : gk, okk ? 16 : 0);
        cp_async16(dV + r * LD + col, okv ? gv + (tok * p.Hkv + hk) * Dv + col : gv, okv ? 16 : 0);
      }
    }
  } else {
    for (int e = tid; e < BN * DP; e += NT) {
      const int r = e / DP, col = e % DP;
      const int j = kt + r;
      uint16_t xk = 0, xv = 0;
      if (j <= hi) {
        const int64_t tok = kv_token_index(p, b, j);
        if (col < D) xk = gk[(tok * p.Hkv + hk) * D + col];
        if (col < Dv) xv = gv[(tok * p.Hkv + hk) * Dv + col];
      }
      dK[r * LD + col] = xk;
      dV[r * LD + col] = xv;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// The KV mainloop shared by the prefill (attn_fwd_kernel) and decode (attn_decode_kernel)
// kernels: key ranges, the cp.async double-buffered walk over the key tiles, and one warp's
// online-softmax step on a tile. The kernels differ only in which 16 query rows a warp owns and
// which keys of each 64-key tile it takes (prefill: its own 16 rows, all 64 keys; decode: the
// CTA's 16 rows, keys 16 * warp .. 16 * warp + 15); everything else (row mapping, epilogue,
// merging of per-warp states) stays in the kernels.

// Keys of one CTA whose rows are gr_first .. gr_last (map_row, with the kernel's row mapping).
// [k0, k1): the split's keys (all keys when unsplit). [lo, hi_cta]: keys visible to some row of
// the CTA (the bounds are monotonic in the row); [max_lo, min_hi]: keys visible to every row
// (tiles inside need no mask). The mainloop walks ntiles tiles of BN keys from kbase (ntiles = 0:
// nothing visible).
struct KvRange {
  int k0, k1;
  int hi_cta;
  int max_lo, min_hi;
  int kbase, ntiles;
};
__device__ __forceinline__ KvRange kv_range(const AttnParams& p, bool partial, int split, int sq, int sk, int gr_first,
                                            int gr_last, int rows_total, int packed, int G, int hk, int hfix) {
  KvRange kr;
  kr.k0 = 0, kr.k1 = sk;
  if (partial) {
    const int64_t per = static_cast<int64_t>(tiles_per_split(p, sk)) * p.tile_n;
    const int64_t a = per * split, e = per * (split + 1);
    kr.k0 = static_cast<int>(a < sk ? a : sk);
    kr.k1 = static_cast<int>(e < sk ? e : sk);
  }
  const RowMap rf = map_row(gr_first, rows_total, packed, G, hk, hfix);
  const RowMap rl = map_row(gr_last, rows_total, packed, G, hk, hfix);
  const KeyRange kf = visible_keys(p, rf.i, sq, sk), kl = visible_keys(p, rl.i, sq, sk);
  const int lo_cta = max(kf.lo, kr.k0);
  kr.hi_cta = min(kl.hi, kr.k1 - 1);
  kr.max_lo = max(kl.lo, kr.k0), kr.min_hi = min(kf.hi, kr.k1 - 1);
  kr.kbase = 0, kr.ntiles = 0;
  if (lo_cta <= kr.hi_cta) {
    kr.kbase = max(kr.k0, (lo_cta / BN) * BN);
    kr.ntiles = (kr.hi_cta - kr.kbase) / BN + 1;
  }
  return kr;
}

// A thread's two query rows of the mainloop (m16n8 fragment rows g and g + 8 of its warp's 16;
// here CTA rows gr and gr + 8, mapped by map_row): rm[r], and the keys [lo[r], hi[r]] of the split
// that row r sees (empty, lo > hi, for a row outside the sequence).
__device__ __forceinline__ void thread_rows(const AttnParams& p, int gr, int rows_total, int packed, int G, int hk,
                                            int hfix, int sq, int sk, const KvRange& kr, RowMap (&rm)[2],
                                            int (&lo)[2], int (&hi)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rm[r] = map_row(gr + 8 * r, rows_total, packed, G, hk, hfix);
    if (rm[r].valid) {
      const KeyRange k = visible_keys(p, rm[r].i, sq, sk);
      lo[r] = max(k.lo, kr.k0);
      hi[r] = min(k.hi, kr.k1 - 1);
    } else {
      lo[r] = 1, hi[r] = 0;
    }
  }
}

// Score transform into log2 units: x * scale * log2(e), or with a softcap
// softcap * log2(e) * tanh(x * scale / softcap).
struct ScoreScale {
  float sl2;
  bool softcap;
  float cap_in, cap_out;
};
__device__ __forceinline__ ScoreScale score_scale(const AttnParams& p) {
  ScoreScale sc;
  sc.sl2 = p.scale * kLog2e;
  sc.softcap = p.softcap > 0.f;
  sc.cap_in = sc.softcap ? p.scale / p.softcap : 0.f, sc.cap_out = p.softcap * kLog2e;
  return sc;
}

// One warp's online-softmax step on NK keys of a tile (NK a multiple of 16).
//   sQ rows qr0 .. qr0 + 15: the warp's 16 query rows; cK, cV: the NK key rows of K and V; all row
//   stride LD, DP columns, in shared memory. j0: sequence index of the first of the NK keys.
//   Masking: unless all NK keys lie in [max_lo, min_hi] (visible to every row), key j is kept for
//   row r (this thread's rows g = lane / 4 and g + 8 of the 16) iff rlo[r] <= j <= rhi[r], else
//   its score is -inf.
// State, per thread (m16n8 C-fragment layout: row r = g + 8r, columns n * 8 + 2 * (lane % 4) + {0,1}):
//   acc[n][2r + c]: unnormalised O of row r; mrow[r]: running max of row r in log2 units (-inf
//   while all its keys were masked); lrow[r]: running sum of exp2(score - mrow) over this thread's
//   columns only (the caller quad-reduces it).
// Steps: S = Q K^T (mma, fp32); scores to log2 units (ScoreScale), mask; new max over the quad,
// alpha = exp2(m_old - m_new) (m_new = -inf counts as 0); P = exp2(S - m_new);
// l = l * alpha + rowsum(P); acc = acc * alpha + P V (P rounded to T, from registers).
template <typename T, int DP, int LD, int NK>
__device__ __forceinline__ void kv_tile_step(float (&acc)[DP / 8][4], float (&mrow)[2], float (&lrow)[2],
                                             const uint16_t* sQ, int qr0, const uint16_t* cK, const uint16_t* cV,
                                             int j0, int max_lo, int min_hi, const int (&rlo)[2],
                                             const int (&rhi)[2], const ScoreScale& sc, int lane) {
  const int qd = lane & 3;
  // S = Q K^T (16 x NK per warp), fp32.
  float s[NK / 8][4];
#pragma unroll
  for (int n = 0; n < NK / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < DP / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4(a, sQ + (qr0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < NK / 16; ++np) {
      uint32_t bb[4];
      ldsm_x4(bb, cK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
      Ty<T>::mma(s[2 * np], a, bb[0], bb[1]);
      Ty<T>::mma(s[2 * np + 1], a, bb[2], bb[3]);
    }
  }
  // Scores in log2 units, softcap, mask.
  const bool need_mask = !(j0 >= max_lo && j0 + NK - 1 <= min_hi);
#pragma unroll
  for (int n = 0; n < NK / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[n][e];
      x = sc.softcap ? sc.cap_out * tanhf(x * sc.cap_in) : x * sc.sl2;
      if (need_mask) {
        const int j = j0 + n * 8 + qd * 2 + (e & 1);
        const int r = e >> 1;
        if (j < rlo[r] || j > rhi[r]) x = -INFINITY;
      }
      s[n][e] = x;
    }
  // Online softmax: running max, rescale of l and O. (The tile max needs no -inf seed: mrow[r] is
  // never NaN, so fmaxf(mrow[r], mx) is the same whether an all-NaN row gives mx = NaN or -inf.)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = fmaxf(s[0][2 * r], s[0][2 * r + 1]);
#pragma unroll
    for (int n = 1; n < NK / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(mrow[r], mx);
    const float muse = mnew == -INFINITY ? 0.f : mnew;
    const float alpha = exp2f(mrow[r] - muse);
    mrow[r] = mnew;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) {
      s[n][2 * r] = exp2f(s[n][2 * r] - muse);
      s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] - muse);
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    lrow[r] = lrow[r] * alpha + sum;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      acc[n][2 * r] *= alpha;
      acc[n][2 * r + 1] *= alpha;
    }
  }
  // O += P V: P from registers (the S accumulator layout is the A fragment layout).
#pragma unroll
  for (int kk = 0; kk < NK / 16; ++kk) {
    uint32_t a[4];
    a[0] = Ty<T>::pack(s[2 * kk][0], s[2 * kk][1]);
    a[1] = Ty<T>::pack(s[2 * kk][2], s[2 * kk][3]);
    a[2] = Ty<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = Ty<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
    for (int dp = 0; dp < DP / 16; ++dp) {
      uint32_t bb[4];
      ldsm_x4_t(bb, cV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 + (lane >> 4) * 8);
      Ty<T>::mma(acc[2 * dp], a, bb[0], bb[1]);
      Ty<T>::mma(acc[2 * dp + 1], a, bb[2], bb[3]);
    }
  }
}

// The KV mainloop: every thread of the CTA calls it (it holds the CTA's barriers).
//   Shared memory: sK, sV hold 2 stages of BN rows each (row stride LD); stage st of K is
//   sK + st * BN * LD. load_q() issues the Q tile's cp.async, load_kv(t, st) those of key tile t
//   (keys kr.kbase + t * BN ..) into stage st; neither commits. Q and tile 0 form the first
//   cp.async group; tile t + 1 is loaded while tile t is consumed, with a barrier before and after
//   each tile, so on return all copies have landed and the K/V stages may be reused.
//   Per warp and tile (only where `active`; the barriers are reached regardless): kv_tile_step of
//   the warp's query rows (sQ rows qr0 .. qr0 + 15) on the NK keys at offset koff of the tile
//   (stage rows koff .., keys kr.kbase + t * BN + koff ..), with p's scale / softcap, masked
//   unless those keys lie in [kr.max_lo, kr.min_hi].
//   Outputs: acc, mrow, lrow as in kv_tile_step, initialised here to 0 / -inf / 0 (so also when
//   kr.ntiles == 0 and nothing is loaded).
template <typename T, int DP, int LD, int NK, typename LoadQ, typename LoadKv>
__device__ __forceinline__ void kv_mainloop(float (&acc)[DP / 8][4], float (&mrow)[2], float (&lrow)[2],
                                            const AttnParams& p, const KvRange& kr, const LoadQ& load_q,
                                            const LoadKv& load_kv, const uint16_t* sQ, int qr0, const uint16_t* sK,
                                            const uint16_t* sV, int koff, bool active, const int (&rlo)[2],
                                            const int (&rhi)[2], int lane) {
#pragma unroll
  for (int n = 0; n < DP / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.f;
#pragma unroll
  for (int r = 0; r < 2; ++r) mrow[r] = -INFINITY, lrow[r] = 0.f;
  const ScoreScale sc = score_scale(p);
  const int ntiles = kr.ntiles;

  if (ntiles > 0) {
    load_q();
    load_kv(0, 0);
    cp_async_commit();
    for (int t = 0; t < ntiles; ++t) {
      if (t + 1 < ntiles) {
        load_kv(t + 1, (t + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      if (active) {
        kv_tile_step<T, DP, LD, NK>(acc, mrow, lrow, sQ, qr0, sK + (t & 1) * BN * LD + koff * LD,
                                    sV + (t & 1) * BN * LD + koff * LD, kr.kbase + t * BN + koff, kr.max_lo,
                                    kr.min_hi, rlo, rhi, sc, lane);
      }
      __syncthreads();  // stage t & 1 is overwritten by the loads of iteration t + 1
    }
  }
}

// Final normalisation of one query row, from its running max m (log2 units) and full sum l: the
// sink (sink[h], natural units; only when with_sink) joins the denominator; O = acc * oscale,
// natural-log lse. Fully masked rows without a sink: oscale 0, lse -inf.
struct RowNorm {
  float oscale, lse;
};
__device__ __forceinline__ RowNorm row_norm(float m, float l, bool with_sink, const float* sink, int h) {
  RowNorm rn;
  if (with_sink) {
    const float sx = sink[h] * kLog2e;
    const float mf = fmaxf(m, sx);
    const float em = exp2f(m - mf);
    l = l * em + exp2f(sx - mf);
    rn.oscale = em / l;
    rn.lse = (mf + log2f(l)) * kLn2;
  } else if (l > 0.f) {
    rn.oscale = 1.f / l;
    rn.lse = (m + log2f(l)) * kLn2;
  } else {
    rn.oscale = 0.f;
    rn.lse = -INFINITY;
  }
  return rn;
}

}  // namespace assay::kernels::attention::fwd
