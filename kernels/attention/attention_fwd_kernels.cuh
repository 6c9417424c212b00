// Internal to kernels/attention (included through attention_fwd.h by attention_fwd.cu and
// attention_decode.cu only): the v2 prefill kernel (attn_fwd_kernel), the v3 decode kernel
// (attn_decode_kernel) and their launch templates, on the mainloop of attention_fwd_mainloop.cuh.
//
// Tensors: as attention_fwd.h: q, k, v bf16|fp16, sink fp32 [Hq] -> O (dtype of q), LSE fp32, or
// with Flags::partial the fp32 split partials [num_splits, <O layout>] / [num_splits, <LSE layout>].
// Convention: FlashAttention (reference/attention/attention.h).
#pragma once
#include "kernels/attention/attention_fwd_mainloop.cuh"

namespace assay::kernels::attention::fwd {

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
