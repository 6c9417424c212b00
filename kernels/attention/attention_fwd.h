// Tensor-core attention forward (FA2-style) for sm_90: raw launchers for the gate registration
// (kernels/attention/attention.cpp) and the benchmark.
//
// Tensors (golden names, storage codes, docs/DESIGN.md "Axis vocabulary"; see
// attention_params.h):
//   q  bf16|fp16 dense [B, Sq, Hq, D] | varlen [total_q, Hq, D]
//   k  bf16|fp16 dense [B, Sk, Hkv, D] | packed [total_k, Hkv, D] | paged [num_pages, page_size, Hkv, D]
//   v  as k with Dv;  sink fp32 [Hq] (optional)
//   O  dtype of q, layout of q with Dv;  LSE fp32 dense [B, Hq, Sq] | varlen [Hq, total_q]
// Convention: FlashAttention (reference/attention/attention.h): bottom-right causal, inclusive
// window, GQA h / (Hq / Hkv), sink in the denominator only (folded into split 0), fully masked
// rows O = 0 / LSE = -inf (LSE = sink with a sink), natural-log LSE.
//
// Every launcher needs p.max_seqlen_q (host-side upper bound of the per-sequence query length:
// the grid is sized from it) and p.max_seqlen_k (decode: split heuristic only).
// Head dims: any D, Dv in [1, 256]; the kernels pad both up to one of {32, 64, 96, 128, 256}
// with zero fill (16-byte cp.async when D and Dv are multiples of 8 and the tensors are 16-byte
// aligned, element loads otherwise).
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/attention_params.h"

namespace assay::kernels::attention {

// v2: one CTA per (query tile of 128 rows (64 for padded head dim 256), batch, query head); the
// whole key range; writes O and LSE directly. Ignores p.num_splits.
cudaError_t attention_fwd_v2(const AttnParams& p, cudaStream_t s);

// v2 split-KV: grid.z = p.num_splits over the oracle's split scheme (p.tile_n keys per tile,
// ceil(n_tiles / num_splits) contiguous tiles per split); fp32 partials in a cudaMallocAsync
// workspace on s, combined by launch_attention_combine, workspace freed on s. When set,
// p.o_partial_export (fp32 [num_splits, <O layout>]) and p.lse_partial_export (fp32
// [num_splits, <LSE layout>]) receive copies of the partials before the combine: the golden's
// O_partial / LSE_partial intermediates (run_split_kernel, attention_params.h).
cudaError_t attention_fwd_v2_split(const AttnParams& p, cudaStream_t s);

// v3 decode: the Sq x (Hq / Hkv) query rows of one GQA group packed into one query tile (K/V of a
// KV head read once per group), split-KV over the keys. num_splits > 0: that many splits of the
// p.tile_n scheme; 0: chosen from the SM count (tile_n = 64). One split writes O / LSE directly.
// Meant for max_seqlen_q <= 16 (correct for any Sq).
cudaError_t attention_decode_v3(const AttnParams& p, cudaStream_t s, int num_splits);

// The padded head dim the kernels use for (D, Dv), or 0 if unsupported (max(D, Dv) > 256).
int attention_fwd_padded_dim(int D, int Dv);

}  // namespace assay::kernels::attention

// ------------------------------------------------------------------------------------------------
// Implementation section: the kernel template, compiled only by attention_fwd.cu (bf16
// instantiations and the v2 launchers) and attention_decode.cu (fp16 instantiations and the v3
// launcher), so that the two halves build in parallel.
#if defined(__CUDACC__) && defined(ASSAY_ATTENTION_FWD_IMPL)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace assay::kernels::attention::fwd {

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

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

template <typename T>
struct Ty;
template <>
struct Ty<__nv_bfloat16> {
  __device__ static __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ uint16_t code(float x) {
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    return *reinterpret_cast<uint16_t*>(&h);
  }
};
template <>
struct Ty<__half> {
  __device__ static __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ uint16_t code(float x) {
    __half h = __float2half_rn(x);
    return *reinterpret_cast<uint16_t*>(&h);
  }
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

// Grid: x = query tiles (heaviest first), y = B * Hq (B * Hkv when packed), z = splits.
template <typename T, int DP>
__global__ void __launch_bounds__(Cfg<DP>::NT, 1) attn_fwd_kernel(const AttnParams p, const Flags f) {
  using C = Cfg<DP>;
  constexpr int BM = C::BM, LD = C::LD, NT = C::NT;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sK = sQ + BM * LD;
  uint16_t* sV = sK + 2 * BN * LD;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int mblock = gridDim.x - 1 - blockIdx.x;
  const int G = p.Hq / p.Hkv;
  int b, hk, hfix = 0;
  if (f.packed) {
    b = blockIdx.y / p.Hkv;
    hk = blockIdx.y % p.Hkv;
  } else {
    b = blockIdx.y / p.Hq;
    hfix = blockIdx.y % p.Hq;
    hk = kv_head(p, hfix);
  }
  const int split = blockIdx.z;
  const int sq = seqlen_q(p, b), sk = seqlen_k(p, b);
  const int rows_total = f.packed ? sq * G : sq;
  const int row0 = mblock * BM;
  if (row0 >= rows_total) return;
  const int qs = q_start(p, b);

  // Keys of this split and CTA (its rows row0 .. last).
  const int last = (row0 + BM < rows_total ? row0 + BM : rows_total) - 1;
  const KvRange kr = kv_range(p, f.partial, split, sq, sk, row0, last, rows_total, f.packed, G, hk, hfix);

  // Per-thread rows (two per thread: g and g + 8 of the warp's 16).
  const int wr0 = warp * 16;
  const bool warp_active = row0 + wr0 <= last;
  const int g = lane >> 2, qd = lane & 3;
  RowMap rm[2];
  int rlo[2], rhi[2];
  thread_rows(p, row0 + wr0 + g, rows_total, f.packed, G, hk, hfix, sq, sk, kr, rm, rlo, rhi);

  const uint16_t* __restrict__ gq = static_cast<const uint16_t*>(p.q);
  const uint16_t* __restrict__ gk = static_cast<const uint16_t*>(p.k);
  const uint16_t* __restrict__ gv = static_cast<const uint16_t*>(p.v);
  const int Dv = p.Dv;

  auto load_q = [&]() {
    load_q_tile<BM, DP, LD, NT>(sQ, gq, p, f.vec16, tid, row0, rows_total, f.packed, G, hk, hfix, qs);
  };
  // K/V tile t into stage st: keys kbase + t*BN + r; keys past hi_cta are zero rows.
  auto load_kv = [&](int t, int st) {
    load_kv_tile<DP, LD, NT>(sK + st * BN * LD, sV + st * BN * LD, gk, gv, p, f.vec16, tid, b, hk,
                             kr.kbase + t * BN, kr.hi_cta);
  };

  // Mainloop: each warp its own 16 query rows against all BN keys of every tile.
  float acc[DP / 8][4], mrow[2], lrow[2];
  kv_mainloop<T, DP, LD, BN>(acc, mrow, lrow, p, kr, load_q, load_kv, sQ, wr0, sK, sV, /*koff=*/0,
                             warp_active, rlo, rhi, lane);
  if (!warp_active) return;

  // Finalize: quad-reduce l, fold the sink (unsplit, or split 0), normalise, store.
  const bool with_sink = p.sink != nullptr && (!f.partial || split == 0);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = lrow[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (!rm[r].valid) continue;
    const int i = rm[r].i, h = rm[r].h;
    const RowNorm rn = row_norm(mrow[r], l, with_sink, p.sink, h);
    const float oscale = rn.oscale, lse = rn.lse;
    const int64_t qrow = static_cast<int64_t>(qs + i);
    if (f.partial) {
      const int64_t prow = static_cast<int64_t>(split) * p.total_q + qrow;
      float* po = p.o_partial + (prow * p.Hq + h) * Dv;
#pragma unroll
      for (int n = 0; n < DP / 8; ++n) {
        const int col = n * 8 + qd * 2;
        if ((Dv & 1) == 0) {
          if (col < Dv) *reinterpret_cast<float2*>(po + col) = make_float2(acc[n][2 * r] * oscale, acc[n][2 * r + 1] * oscale);
        } else {
          if (col < Dv) po[col] = acc[n][2 * r] * oscale;
          if (col + 1 < Dv) po[col + 1] = acc[n][2 * r + 1] * oscale;
        }
      }
      if (qd == 0) p.lse_partial[prow * p.Hq + h] = lse;
    } else {
      uint16_t* po = static_cast<uint16_t*>(p.o) + (qrow * p.Hq + h) * Dv;
#pragma unroll
      for (int n = 0; n < DP / 8; ++n) {
        const int col = n * 8 + qd * 2;
        const uint16_t c0 = Ty<T>::code(acc[n][2 * r] * oscale), c1 = Ty<T>::code(acc[n][2 * r + 1] * oscale);
        if ((Dv & 1) == 0) {
          if (col < Dv) *reinterpret_cast<uint32_t*>(po + col) = static_cast<uint32_t>(c0) | (static_cast<uint32_t>(c1) << 16);
        } else {
          if (col < Dv) po[col] = c0;
          if (col + 1 < Dv) po[col + 1] = c1;
        }
      }
      if (qd == 0) p.lse[lse_index(p, b, h, i)] = lse;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// v3 decode kernel: the packed query rows of one GQA group fit one m16 tile (Sq * G <= 16). The 4
// warps split every 64-key tile by keys (warp w: keys 16w .. 16w + 15), each with its own online
// softmax state over the same 16 rows; the four states are merged through shared memory at the
// end (max, rescaled sums), in a fixed order (deterministic).
// Grid: x = 1, y = B * Hkv, z = splits.
template <int DP>
struct DCfg {
  static constexpr int NW = 4, NT = 128, LD = DP + 8;
  static constexpr int SMEM = (16 + 4 * BN) * LD * 2;  // Q (16 rows) + 2 stages of K and V
};

template <typename T, int DP>
__global__ void __launch_bounds__(128) attn_decode_kernel(const AttnParams p, const Flags f) {
  using C = DCfg<DP>;
  constexpr int LD = C::LD, NT = C::NT, NW = C::NW;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ float red_m[NW][16], red_l[NW][16];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sK = sQ + 16 * LD;
  uint16_t* sV = sK + 2 * BN * LD;
  float* red = reinterpret_cast<float*>(sK);  // [NW][16][DP], reuses the K/V stages after the loop

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int G = p.Hq / p.Hkv;
  const int b = blockIdx.y / p.Hkv, hk = blockIdx.y % p.Hkv, split = blockIdx.z;
  const int sq = seqlen_q(p, b), sk = seqlen_k(p, b);
  const int rows_total = min(sq * G, 16);  // the host guarantees sq * G <= 16
  if (rows_total <= 0) return;
  const int qs = q_start(p, b);

  const KvRange kr = kv_range(p, f.partial, split, sq, sk, 0, rows_total - 1, rows_total, 1, G, hk, 0);

  const int g = lane >> 2, qd = lane & 3;
  RowMap rm[2];
  int rlo[2], rhi[2];
  thread_rows(p, g, rows_total, 1, G, hk, 0, sq, sk, kr, rm, rlo, rhi);

  const uint16_t* __restrict__ gq = static_cast<const uint16_t*>(p.q);
  const uint16_t* __restrict__ gk = static_cast<const uint16_t*>(p.k);
  const uint16_t* __restrict__ gv = static_cast<const uint16_t*>(p.v);
  const int Dv = p.Dv;

  auto load_q = [&]() { load_q_tile<16, DP, LD, NT>(sQ, gq, p, f.vec16, tid, 0, rows_total, 1, G, hk, 0, qs); };
  auto load_kv = [&](int t, int st) {
    load_kv_tile<DP, LD, NT>(sK + st * BN * LD, sV + st * BN * LD, gk, gv, p, f.vec16, tid, b, hk,
                             kr.kbase + t * BN, kr.hi_cta);
  };

  // Mainloop: every warp the CTA's 16 query rows against its 16 keys (16 * warp ..) of each tile.
  float acc[DP / 8][4], mrow[2], lrow[2];
  kv_mainloop<T, DP, LD, 16>(acc, mrow, lrow, p, kr, load_q, load_kv, sQ, 0, sK, sV, /*koff=*/warp * 16,
                             /*active=*/true, rlo, rhi, lane);

  // Merge the four warps' states (the K/V stages are free: the loop ended with a barrier).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = lrow[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (qd == 0) {
      red_m[warp][g + 8 * r] = mrow[r];
      red_l[warp][g + 8 * r] = l;
    }
  }
#pragma unroll
  for (int n = 0; n < DP / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[(warp * 16 + g + 8 * (e >> 1)) * DP + n * 8 + qd * 2 + (e & 1)] = acc[n][e];
  __syncthreads();

  const bool with_sink = p.sink != nullptr && (!f.partial || split == 0);
  for (int idx = tid; idx < 16 * DP; idx += NT) {
    const int r = idx / DP, c = idx % DP;
    const RowMap m = map_row(r, rows_total, 1, G, hk, 0);
    if (!m.valid || c >= Dv) continue;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, red_m[w][r]);
    const float Mu = M == -INFINITY ? 0.f : M;
    float L = 0.f, O = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float sc = exp2f(red_m[w][r] - Mu);
      L += red_l[w][r] * sc;
      O += red[(w * 16 + r) * DP + c] * sc;
    }
    const RowNorm rn = row_norm(M, L, with_sink, p.sink, m.h);
    const float oscale = rn.oscale, lse = rn.lse;
    const int64_t qrow = static_cast<int64_t>(qs + m.i);
    if (f.partial) {
      const int64_t prow = static_cast<int64_t>(split) * p.total_q + qrow;
      p.o_partial[(prow * p.Hq + m.h) * Dv + c] = O * oscale;
      if (c == 0) p.lse_partial[prow * p.Hq + m.h] = lse;
    } else {
      static_cast<uint16_t*>(p.o)[(qrow * p.Hq + m.h) * Dv + c] = Ty<T>::code(O * oscale);
      if (c == 0) p.lse[lse_index(p, b, m.h, m.i)] = lse;
    }
  }
}

template <typename T, int DP>
cudaError_t launch_decode(const AttnParams& p, bool partial, cudaStream_t s) {
  using C = DCfg<DP>;
  const int64_t gy = static_cast<int64_t>(p.B) * p.Hkv;
  const int gz = partial ? p.num_splits : 1;
  if (gy <= 0 || p.max_seqlen_q <= 0) return cudaSuccess;
  if (gy > 65535 || gz > 65535) return cudaErrorInvalidConfiguration;
  if (static_cast<int64_t>(p.max_seqlen_q) * (p.Hq / p.Hkv) > 16) return cudaErrorInvalidValue;
  Flags f;
  f.packed = 1, f.partial = partial;
  const auto al = [](const void* x) { return (reinterpret_cast<uintptr_t>(x) & 15u) == 0; };
  f.vec16 = p.D % 8 == 0 && p.Dv % 8 == 0 && al(p.q) && al(p.k) && al(p.v);
  auto kern = attn_decode_kernel<T, DP>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
  if (e != cudaSuccess) return e;
  kern<<<dim3(1, static_cast<unsigned>(gy), static_cast<unsigned>(gz)), C::NT, C::SMEM, s>>>(p, f);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_decode_dispatch(const AttnParams& p, bool partial, cudaStream_t s) {
  switch (attention_fwd_padded_dim(p.D, p.Dv)) {
    case 32: return launch_decode<T, 32>(p, partial, s);
    case 64: return launch_decode<T, 64>(p, partial, s);
    case 96: return launch_decode<T, 96>(p, partial, s);
    case 128: return launch_decode<T, 128>(p, partial, s);
    case 256: return launch_decode<T, 256>(p, partial, s);
    default: return cudaErrorInvalidValue;
  }
}

// Launch one instantiation: packed / partial as in Flags; grid from p.max_seqlen_q.
template <typename T, int DP>
cudaError_t launch_fwd(const AttnParams& p, bool packed, bool partial, cudaStream_t s) {
  using C = Cfg<DP>;
  const int G = p.Hq / p.Hkv;
  const int64_t rows = packed ? static_cast<int64_t>(p.max_seqlen_q) * G : p.max_seqlen_q;
  const int64_t gx = (rows + C::BM - 1) / C::BM;
  const int64_t gy = static_cast<int64_t>(p.B) * (packed ? p.Hkv : p.Hq);
  const int gz = partial ? p.num_splits : 1;
  if (gx <= 0 || gy <= 0) return cudaSuccess;
  if (gy > 65535 || gz > 65535 || gx > 0x7fffffff) return cudaErrorInvalidConfiguration;
  Flags f;
  f.packed = packed, f.partial = partial;
  const auto al = [](const void* x) { return (reinterpret_cast<uintptr_t>(x) & 15u) == 0; };
  f.vec16 = p.D % 8 == 0 && p.Dv % 8 == 0 && al(p.q) && al(p.k) && al(p.v);
  auto kern = attn_fwd_kernel<T, DP>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
  if (e != cudaSuccess) return e;
  kern<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz)), C::NT, C::SMEM, s>>>(p, f);
  return cudaGetLastError();
}

// Dispatch on the padded head dim (bf16 instantiations live in attention_fwd.cu, fp16 ones in
// attention_decode.cu).
cudaError_t launch_fwd_bf16(const AttnParams& p, bool packed, bool partial, cudaStream_t s);
cudaError_t launch_fwd_f16(const AttnParams& p, bool packed, bool partial, cudaStream_t s);

cudaError_t launch_dec_bf16(const AttnParams& p, bool partial, cudaStream_t s);
cudaError_t launch_dec_f16(const AttnParams& p, bool partial, cudaStream_t s);
inline cudaError_t launch_dec_any(const AttnParams& p, bool partial, cudaStream_t s) {
  return p.fp16 ? launch_dec_f16(p, partial, s) : launch_dec_bf16(p, partial, s);
}

inline cudaError_t launch_any(const AttnParams& p, bool packed, bool partial, cudaStream_t s) {
  return p.fp16 ? launch_fwd_f16(p, packed, partial, s) : launch_fwd_bf16(p, packed, partial, s);
}

template <typename T>
cudaError_t launch_fwd_dispatch(const AttnParams& p, bool packed, bool partial, cudaStream_t s) {
  switch (attention_fwd_padded_dim(p.D, p.Dv)) {
    case 32: return launch_fwd<T, 32>(p, packed, partial, s);
    case 64: return launch_fwd<T, 64>(p, packed, partial, s);
    case 96: return launch_fwd<T, 96>(p, packed, partial, s);
    case 128: return launch_fwd<T, 128>(p, packed, partial, s);
    case 256: return launch_fwd<T, 256>(p, packed, partial, s);
    default: return cudaErrorInvalidValue;
  }
}

// Split-KV driver: fp32 partial workspace on s, kernel (decode kernel when `decode`, else the
// v2 kernel with `packed`), combine, free.
cudaError_t run_split(AttnParams p, bool packed, bool decode, cudaStream_t s);

}  // namespace assay::kernels::attention::fwd
#endif
