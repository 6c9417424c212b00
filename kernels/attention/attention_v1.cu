// attention_v1: readable baseline attention forward (no tensor cores) + the split-KV driver.
//
// Tensors (golden names, storage codes, docs/DESIGN.md "Axis vocabulary"; see
// attention_params.h):
//   q  bf16|fp16 dense [B, Sq, Hq, D] | varlen [total_q, Hq, D] (cu_seqlens_q)
//   k  bf16|fp16 dense [B, Sk, Hkv, D] | packed [total_k, Hkv, D] | paged [num_pages, page_size, Hkv, D]
//   v  as k with Dv;  sink fp32 [Hq] (optional);  cu_seqlens_q/k, seqused_k, block_table int32
//   O  dtype of q, layout of q with Dv;  LSE fp32 dense [B, Hq, Sq] | varlen [Hq, total_q]
//   split path: o_partial fp32 [num_splits, total_q, Hq, Dv], lse_partial fp32 [num_splits, total_q, Hq]
//
// Variants in this file:
//   v1  one CTA of 128 threads per (query tile of 16 rows, (batch, query head), split). Q tile,
//       KV tiles of TN = min(tile_n, 128) keys (halved until the dynamic shared memory fits),
//       scores, probabilities and the O accumulator all live in shared memory as fp32; every
//       product is a scalar fp32 loop. Online softmax per KV tile: running max m, running sum l,
//       O rescaled by exp(m_old - m_new). KV tiles outside the CTA's visible key range are skipped;
//       masking is per element from each row's inclusive visible range.
//       Split-KV (num_splits > 1): grid.z = num_splits over the oracle's scheme (n_tiles =
//       ceil(sk / tile_n) cut into groups of ceil(n_tiles / num_splits) tiles); each split writes
//       fp32 partials normalised by its own sum (sink folded into split 0; empty split: O = 0,
//       LSE = -inf), then launch_attention_combine.
//   The Mutation template argument plants one bug each (attention_v1.h), for kernels/mutants/.
//
// Convention: FlashAttention @ 0251105a2fb1 (reference/attention/attention.h): bottom-right causal
// (the window (left, 0)), inclusive window bounds, GQA h / (Hq / Hkv), softcap on the scaled
// scores before masking, sink logit in the denominator only, fully masked rows O = 0 and LSE = -inf
// (LSE = sink with a sink), natural-log LSE.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attention/attention_combine.h"
#include "kernels/attention/attention_v1.h"

namespace assay::kernels::attention {
namespace {

constexpr int BM = 16;   // query rows per CTA
constexpr int NT = 128;  // threads per CTA
constexpr int NW = NT / 32;

__device__ __forceinline__ float to_f32(uint16_t code, bool fp16) {
  if (fp16) return __half2float(__ushort_as_half(code));
  return __bfloat162float(__ushort_as_bfloat16(code));
}
__device__ __forceinline__ uint16_t from_f32(float x, bool fp16) {
  if (fp16) return __half_as_ushort(__float2half_rn(x));
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// Shared-memory plan (floats): Q [BM][D], K [TN][D + 1] (padded: the score loop reads K rows with
// consecutive threads), V [TN][Dv], S/P [BM][TN], O [BM][Dv], m / l / alpha [BM], lo / hi [BM] (int).
__host__ __device__ inline size_t v1_smem_bytes(int D, int Dv, int TN) {
  const size_t f = static_cast<size_t>(BM) * D + static_cast<size_t>(TN) * (D + 1) + static_cast<size_t>(TN) * Dv +
                   static_cast<size_t>(BM) * TN + static_cast<size_t>(BM) * Dv + 3 * BM;
  return (f + 2 * BM) * sizeof(float);
}

template <Mutation M>
__global__ void __launch_bounds__(NT) attn_v1_kernel(const AttnParams p, const int TN, const int partial) {
  extern __shared__ float smem[];
  const int D = p.D, Dv = p.Dv;
  const int LDK = D + 1;
  float* sQ = smem;
  float* sK = sQ + BM * D;
  float* sV = sK + TN * LDK;
  float* sS = sV + TN * Dv;
  float* sO = sS + BM * TN;
  float* sM = sO + BM * Dv;
  float* sL = sM + BM;
  float* sA = sL + BM;
  int* sLo = reinterpret_cast<int*>(sA + BM);
  int* sHi = sLo + BM;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int b = blockIdx.y / p.Hq, h = blockIdx.y % p.Hq;
  const int split = blockIdx.z;
  const int sq = seqlen_q(p, b), sk = seqlen_k(p, b);
  const int i0 = blockIdx.x * BM;
  if (i0 >= sq) return;  // uniform over the CTA
  const int nrows = sq - i0 < BM ? sq - i0 : BM;
  const int qs = q_start(p, b);
  const int hk = M == Mutation::gqa_modulo ? h % p.Hkv : kv_head(p, h);

  // Keys of this split: [k0, k1).
  int k0 = 0, k1 = sk;
  if (partial) {
    const int64_t per = static_cast<int64_t>(tiles_per_split(p, sk)) * p.tile_n;
    const int64_t a = per * split, e = per * (split + 1);
    k0 = static_cast<int>(a < sk ? a : sk);
    k1 = static_cast<int>(e < sk ? e : sk);
  }

  // Per-row state and visible key range (inclusive, clipped to the split).
  if (tid < BM) {
    int lo = 1, hi = 0;
    if (tid < nrows) {
      const int i = i0 + tid;
      // causal_top_left: the row index shifted so that visible_keys' diagonal i + sk - sq becomes i.
      const KeyRange kr = visible_keys(p, M == Mutation::causal_top_left ? i + sq - sk : i, sq, sk);
      lo = kr.lo > k0 ? kr.lo : k0;
      hi = kr.hi < k1 - 1 ? kr.hi : k1 - 1;
    }
    sLo[tid] = lo, sHi[tid] = hi;
    sM[tid] = -INFINITY, sL[tid] = 0.f, sA[tid] = 0.f;
  }
  const uint16_t* gq = static_cast<const uint16_t*>(p.q);
  const uint16_t* gk = static_cast<const uint16_t*>(p.k);
  const uint16_t* gv = static_cast<const uint16_t*>(p.v);
  for (int e = tid; e < BM * D; e += NT) {
    const int r = e / D, d = e % D;
    sQ[e] = r < nrows ? to_f32(gq[(static_cast<int64_t>(qs + i0 + r) * p.Hq + h) * D + d], p.fp16) : 0.f;
  }
  for (int e = tid; e < BM * Dv; e += NT) sO[e] = 0.f;
  __syncthreads();

  // Union of the rows' ranges; KV tiles of TN keys from the split start, skipping tiles before it.
  int lo_cta = k1, hi_cta = k0 - 1;
  for (int r = 0; r < nrows; ++r) {
    if (sLo[r] > sHi[r]) continue;
    lo_cta = sLo[r] < lo_cta ? sLo[r] : lo_cta;
    hi_cta = sHi[r] > hi_cta ? sHi[r] : hi_cta;
  }
  int kbase = k0, ntiles = 0;
  if (lo_cta <= hi_cta) {
    kbase = k0 + ((lo_cta - k0) / TN) * TN;
    ntiles = (hi_cta - kbase) / TN + 1;
  }
  const bool softcap = p.softcap > 0.f;

  for (int t = 0; t < ntiles; ++t) {
    const int kt = kbase + t * TN;
    // 1. K, V of keys kt .. kt + TN - 1 (zeros past hi_cta). kv_tile0 reads keys 0 .. TN - 1.
    for (int e = tid; e < TN * D; e += NT) {
      const int c = e / D, d = e % D;
      const int j = kt + c, src = M == Mutation::kv_tile0 ? c : j;
      float x = 0.f;
      if (j <= hi_cta && src < sk) x = to_f32(gk[(kv_token_index(p, b, src) * p.Hkv + hk) * D + d], p.fp16);
      sK[c * LDK + d] = x;
    }
    for (int e = tid; e < TN * Dv; e += NT) {
      const int c = e / Dv, d = e % Dv;
      const int j = kt + c, src = M == Mutation::kv_tile0 ? c : j;
      float x = 0.f;
      if (j <= hi_cta && src < sk) x = to_f32(gv[(kv_token_index(p, b, src) * p.Hkv + hk) * Dv + d], p.fp16);
      sV[e] = x;
    }
    __syncthreads();

    // 2. Scores s = scale <q, k> (softcap: softcap * tanh(s / softcap)), masked to -inf outside
    //    each row's visible range.
    for (int e = tid; e < BM * TN; e += NT) {
      const int r = e / TN, c = e % TN;
      const int j = kt + c;
      float s = -INFINITY;
      if (r < nrows && j >= sLo[r] && j <= sHi[r]) {
        float dot = 0.f;
        for (int d = 0; d < D; ++d) dot = fmaf(sQ[r * D + d], sK[c * LDK + d], dot);
        s = dot * p.scale;
        if (softcap) s = p.softcap * tanhf(s / p.softcap);
      }
      sS[e] = s;
    }
    __syncthreads();

    // 3. Online softmax, one warp per row: m_new = max(m_old, max_c s), P = exp(s - m_new),
    //    l = l * alpha + sum P, alpha = exp(m_old - m_new) (0 while m_old = -inf).
    for (int r = warp; r < BM; r += NW) {
      float mx = -INFINITY;
      for (int c = lane; c < TN; c += 32) mx = fmaxf(mx, sS[r * TN + c]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sM[r];
      const float m_new = fmaxf(m_old, mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no key yet: every P is 0
      const float alpha = expf(m_old - m_use);
      float sum = 0.f;
      for (int c = lane; c < TN; c += 32) {
        const float pr = expf(sS[r * TN + c] - m_use);
        sS[r * TN + c] = pr;
        sum += pr;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
      if (lane == 0) {
        sL[r] = sL[r] * alpha + sum;
        sM[r] = m_new;
        sA[r] = M == Mutation::no_o_rescale ? 1.f : alpha;
      }
    }
    __syncthreads();

    // 4. O = alpha O + P V.
    for (int e = tid; e < BM * Dv; e += NT) {
      const int r = e / Dv, d = e % Dv;
      float acc = sO[e] * sA[r];
      for (int c = 0; c < TN; ++c) acc = fmaf(sS[r * TN + c], sV[c * Dv + d], acc);
      sO[e] = acc;
    }
    __syncthreads();  // K, V, S are overwritten by the next tile
  }

  // Finalize: fold the sink (unsplit, or split 0 only), normalise, write O / LSE or the partials.
  const bool with_sink = p.sink != nullptr && (!partial || split == 0);
  if (tid < nrows) {
    const int r = tid, i = i0 + r;
    float m = sM[r], l = sL[r], oscale, lse;
    if (with_sink) {
      const float sx = p.sink[h];
      const float mf = fmaxf(m, sx);
      const float em = expf(m - mf);
      l = l * em + expf(sx - mf);
      oscale = em / l;
      lse = mf + logf(l);
    } else if (l > 0.f) {
      oscale = 1.f / l;
      lse = m + logf(l);
    } else {  // no visible key: O = 0, LSE = -inf
      oscale = 0.f;
      lse = -INFINITY;
    }
    sA[r] = oscale;
    const int64_t qrow = static_cast<int64_t>(qs + i);
    if (partial)
      p.lse_partial[(static_cast<int64_t>(split) * p.total_q + qrow) * p.Hq + h] = lse;
    else
      p.lse[lse_index(p, b, h, i)] = lse;
  }
  __syncthreads();
  for (int e = tid; e < nrows * Dv; e += NT) {
    const int r = e / Dv, d = e % Dv;
    const int64_t qrow = static_cast<int64_t>(qs + i0 + r);
    const float x = sO[e] * sA[r];
    if (partial)
      p.o_partial[((static_cast<int64_t>(split) * p.total_q + qrow) * p.Hq + h) * Dv + d] = x;
    else
      static_cast<uint16_t*>(p.o)[(qrow * p.Hq + h) * Dv + d] = from_f32(x, p.fp16);
  }
}

template <Mutation M>
cudaError_t launch_v1(const AttnParams& p, bool partial, cudaStream_t s) {
  int dev = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) return e;
  int TN = p.tile_n < 128 ? p.tile_n : 128;
  if (TN < 1) TN = 1;
  while (TN > 1 && v1_smem_bytes(p.D, p.Dv, TN) > static_cast<size_t>(optin)) TN = (TN + 1) / 2;
  const size_t smem = v1_smem_bytes(p.D, p.Dv, TN);
  if (smem > static_cast<size_t>(optin)) return cudaErrorInvalidValue;
  const int64_t gx = (static_cast<int64_t>(p.max_seqlen_q) + BM - 1) / BM;
  const int64_t gy = static_cast<int64_t>(p.B) * p.Hq;
  const int gz = partial ? p.num_splits : 1;
  if (gx <= 0 || gy <= 0) return cudaSuccess;
  if (gx > 0x7fffffff || gy > 65535 || gz > 65535) return cudaErrorInvalidConfiguration;
  auto kern = attn_v1_kernel<M>;
  e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  kern<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz)), NT, smem, s>>>(
      p, TN, partial ? 1 : 0);
  return cudaGetLastError();
}

cudaError_t launch_any(Mutation m, const AttnParams& p, bool partial, cudaStream_t s) {
  switch (m) {
    case Mutation::kv_tile0: return launch_v1<Mutation::kv_tile0>(p, partial, s);
    case Mutation::no_o_rescale: return launch_v1<Mutation::no_o_rescale>(p, partial, s);
    case Mutation::gqa_modulo: return launch_v1<Mutation::gqa_modulo>(p, partial, s);
    case Mutation::causal_top_left: return launch_v1<Mutation::causal_top_left>(p, partial, s);
    case Mutation::none:
    case Mutation::fp16_partials: return launch_v1<Mutation::none>(p, partial, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t attention_v1(const AttnParams& p_in, cudaStream_t s, Mutation m) {
  AttnParams p = p_in;
  if (p.D < 1 || p.Dv < 1 || p.D > kAttentionV1MaxHeadDim || p.Dv > kAttentionV1MaxHeadDim) return cudaErrorInvalidValue;
  if (p.Hkv <= 0 || p.Hq % p.Hkv != 0 || p.tile_n < 1 || p.num_splits < 1) return cudaErrorInvalidValue;
  if (p.B <= 0 || p.total_q <= 0 || p.max_seqlen_q <= 0) return cudaSuccess;  // no query row
  if (m == Mutation::fp16_partials && p.num_splits < 2) p.num_splits = 2;  // the mutant forces a split
  if (p.num_splits == 1) return launch_any(m, p, false, s);

  // Split-KV: fp32 partial workspace on s, split kernel, combine, free (all stream-ordered).
  const size_t n_lse = static_cast<size_t>(p.num_splits) * p.total_q * p.Hq;
  const size_t n_o = n_lse * p.Dv;
  void* ws = nullptr;
  cudaError_t e = cudaMallocAsync(&ws, (n_o + n_lse) * sizeof(float), s);
  if (e != cudaSuccess) return e;
  p.o_partial = static_cast<float*>(ws);
  p.lse_partial = p.o_partial + n_o;
  e = launch_any(m, p, true, s);
  if (e == cudaSuccess) e = launch_attention_combine(p, s, m == Mutation::fp16_partials);
  const cudaError_t ef = cudaFreeAsync(ws, s);
  return e != cudaSuccess ? e : ef;
}

}  // namespace assay::kernels::attention
