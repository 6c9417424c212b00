// Hopper attention forward (sm_90a): attention_fwd_sm90. Gate verdicts, sanitizers, mutant kills and
// speed on an H200: docs/ops/attention.md; its CPU-checkable parts are tested in
// kernels/attention/tests/test_attention_sm90_plan.cpp.
//
// Tensors (golden names; storage codes; shared vocabulary):
//   q    bf16|fp16  dense [B, Sq, Hq, D]  | varlen [total_q, Hq, D] (cu_seqlens_q int32 [B+1])
//   k    bf16|fp16  dense [B, Sk, Hkv, D] | packed [total_k, Hkv, D] (cu_seqlens_k int32 [B+1])
//   v    as k with Dv                       seqused_k int32 [B] (optional), sink fp32 [Hq] (optional)
//   O    dtype of q, as q with Dv           LSE fp32 dense [B, Hq, Sq] | varlen [Hq, total_q]
//   D, Dv multiples of 8, max(D, Dv) <= 256 (padded to DP = 64 / 128 / 256 by TMA zero fill).
// Convention: FlashAttention (reference/attention/attention.h): bottom-right causal, inclusive
// windows, GQA h / (Hq / Hkv), softcap on the scaled scores, sink in the denominator only, fully
// masked rows O = 0 / LSE = -inf, natural-log LSE.
//
// Design (FA3's structure, written from the PTX ISA; no CUTLASS):
//   CTA = 3 warp groups (384 threads), one per (128-row query tile, batch, query head); grid
//   x = query tiles (heaviest first under causal), y = B * Hq.
//   Warp group 0, the producer (setmaxnreg 40; one elected thread): TMA (cp.async.bulk.tensor.3d)
//   of the Q tile once (q_full), then for every KV tile t of the CTA's walk: wait k_empty[t % 2]
//   (parity ((t / 2) & 1) ^ 1) and the slot's previous fill (k_full, parity ((t / 2 - 1) & 1)),
//   arm k_full with the tile's bytes, TMA K; the same for V. Each
//   tile is DP / 64 boxes of [BN rows][64] 16-bit elements with the 128-byte swizzle.
//   Warp groups 1 and 2, the consumers (setmaxnreg 232), 64 query rows each:
//     S = Q K^T by wgmma m64nBNk16 (A = Q, B = K, both K-major shared-memory descriptors), k-block
//     0 with scale-d = 0; O += P V by wgmma m64nDPk16 with P from registers (the S accumulator
//     layout is the A fragment layout) and V MN-major (transposed B descriptor).
//     Online softmax overlapped with the GEMMs: in iteration t the consumer issues S_t = Q K_t^T
//     and O += P_{t-1} V_{t-1} back to back, waits for S_t only (wgmma.wait_group 1), computes
//     the scores' scale / softcap / mask, the new row max and the rescale factor while the PV
//     GEMM runs, then waits for it, rescales O, and forms P_t = exp2(S_t - m) (rounded to the
//     input dtype) and the fp32 row sums. The two consumer warp groups' GEMMs and exponentials
//     also interleave on the SM's tensor and SFU pipes (no explicit ping-pong barrier).
//     Consumers release a slot per warp (8 arrivals): K right after S_t, V after PV.
//   Epilogue: quad-reduced row sums, the sink folded in, O = acc / l rounded to the output dtype,
//   LSE in natural log, plain global stores (rows past the sequence and columns past Dv skipped).
// Shapes: BM = 128, BN = 128 (64 at DP = 256), 2 stages; shared memory DP = 64: 81 KiB,
// 128: 161 KiB, 256: 193 KiB (sm90_shape in attention_sm90.h).
#include "kernels/attention/attention_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudaTypedefs.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_params.h"
#include "kernels/common/sm90_ptx.cuh"

namespace assay::kernels::attention {
namespace sm90k {

using namespace assay::kernels::sm90;

[[maybe_unused]] constexpr float kLog2e = 1.4426950408889634f;
[[maybe_unused]] constexpr float kLn2 = 0.6931471805599453f;

template <typename T>
struct Ty;
template <>
struct Ty<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
};
template <>
struct Ty<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
};

// wgmma dispatch on (N, type): SS for S = Q K^T (both K-major), RS for O += P V (V MN-major).
template <typename T, int N>
__device__ __forceinline__ void mma_qk(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  constexpr bool f16 = std::is_same<T, __half>::value;
  if constexpr (N == 64) {
    if constexpr (f16) wgmma_ss_m64n64_f16<0>(d, da, db, scale_d); else wgmma_ss_m64n64_bf16<0>(d, da, db, scale_d);
  } else if constexpr (N == 128) {
    if constexpr (f16) wgmma_ss_m64n128_f16<0>(d, da, db, scale_d); else wgmma_ss_m64n128_bf16<0>(d, da, db, scale_d);
  } else {
    static_assert(N == 256, "N");
    if constexpr (f16) wgmma_ss_m64n256_f16<0>(d, da, db, scale_d); else wgmma_ss_m64n256_bf16<0>(d, da, db, scale_d);
  }
}
template <typename T, int N>
__device__ __forceinline__ void mma_pv(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
  constexpr bool f16 = std::is_same<T, __half>::value;
  if constexpr (N == 64) {
    if constexpr (f16) wgmma_rs_m64n64_f16<1>(d, a, db, 1); else wgmma_rs_m64n64_bf16<1>(d, a, db, 1);
  } else if constexpr (N == 128) {
    if constexpr (f16) wgmma_rs_m64n128_f16<1>(d, a, db, 1); else wgmma_rs_m64n128_bf16<1>(d, a, db, 1);
  } else {
    static_assert(N == 256, "N");
    if constexpr (f16) wgmma_rs_m64n256_f16<1>(d, a, db, 1); else wgmma_rs_m64n256_bf16<1>(d, a, db, 1);
  }
}

// Row offset of sequence b's first key in the k / v tensors (dense or packed).
__device__ __forceinline__ int kv_row0(const AttnParams& p, int b) {
  return p.cu_seqlens_k ? p.cu_seqlens_k[b] : b * p.Sk;
}

template <typename T, int DP, int MUT>
__global__ void __launch_bounds__(kSm90Threads, 1)
    attn_sm90_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                     const __grid_constant__ CUtensorMap tmV, const AttnParams p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // built for a target without the sm_90a features (wgmma, setmaxnreg): never launched
#else
  constexpr Sm90Shape S = sm90_shape(DP);
  constexpr int BM = S.BM, BN = S.BN, ST = S.stages, CH = S.chunks;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // 1024-byte aligned base (SW128 atoms; the slack is part of S.smem_bytes).
  const uint32_t raw = smem_u32(smem_raw);
  unsigned char* smem = smem_raw + ((1024u - (raw & 1023u)) & 1023u);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + S.off_bar);
  uint64_t* q_full = bar;
  uint64_t* k_full = bar + 1;
  uint64_t* k_empty = bar + 1 + ST;
  uint64_t* v_full = bar + 1 + 2 * ST;
  uint64_t* v_empty = bar + 1 + 3 * ST;

  const int mblock = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int b = static_cast<int>(blockIdx.y) / p.Hq, h = static_cast<int>(blockIdx.y) % p.Hq;
  const int hk = kv_head(p, h);
  const int sq = seqlen_q(p, b), sk = seqlen_k(p, b);
  const int row0 = mblock * BM;
  if (row0 >= sq) return;  // the whole CTA, before any barrier exists
  const int row_last = min(row0 + BM, sq) - 1;
  const Sm90KvPlan kp = sm90_kv_plan(p, BN, row0, row_last, sq, sk);
  const int ntiles = kp.ntiles;

  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31, wg = tid >> 7;
  if (tid == 0) {
    mbar_init(q_full, 1);
#pragma unroll
    for (int s = 0; s < ST; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], kSm90ConsumerWarps);
      mbar_init(&v_empty[s], kSm90ConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();

  // ------------------------------------------------------------------------------------------
  // Producer warp group: one thread issues every TMA.
  if (wg == 0) {
    setmaxnreg_dec<kSm90ProducerRegs>();
    if (warp == 0 && lane == 0 && ntiles > 0) {
      tma_prefetch_desc(&tmQ);
      tma_prefetch_desc(&tmK);
      tma_prefetch_desc(&tmV);
      const int qrow = q_start(p, b) + row0;
      mbar_arrive_expect_tx(q_full, static_cast<uint32_t>(S.q_bytes));
#pragma unroll
      for (int c = 0; c < CH; ++c) tma_load_3d(smem + sm90_q_box_off(S, c), &tmQ, q_full, c * 64, h, qrow);
      const int krow0 = kv_row0(p, b);
      for (int t = 0; t < ntiles; ++t) {
        const int st = sm90_stage(t, ST);
        const uint32_t par = sm90_empty_parity(t, ST);
        const int key0 = MUT == static_cast<int>(Sm90Mutation::kv_tile0) ? kp.kbase : kp.kbase + t * BN;
        // stage_stuck: the write stage saturates at the last slot, whose TMA is then skipped
        // (the barrier arrivals go on, so the ring keeps turning on stale contents).
        const bool load = !(MUT == static_cast<int>(Sm90Mutation::stage_stuck) && t >= ST);
        // The slot's previous fill has landed (always so once the consumers released it; a
        // consumer that skipped its wait could otherwise make us arm a barrier twice in a phase).
        if (t >= ST) mbar_wait(&k_full[st], sm90_full_parity(t - ST, ST));
        mbar_wait(&k_empty[st], par);
        if (load) {
          mbar_arrive_expect_tx(&k_full[st], static_cast<uint32_t>(S.kv_stage_bytes));
#pragma unroll
          for (int c = 0; c < CH; ++c)
            tma_load_3d(smem + sm90_k_box_off(S, st, c), &tmK, &k_full[st], c * 64, hk, krow0 + key0);
        } else {
          mbar_arrive(&k_full[st]);
        }
        if (t >= ST) mbar_wait(&v_full[st], sm90_full_parity(t - ST, ST));
        mbar_wait(&v_empty[st], par);
        if (load) {
          mbar_arrive_expect_tx(&v_full[st], static_cast<uint32_t>(S.kv_stage_bytes));
#pragma unroll
          for (int c = 0; c < CH; ++c)
            tma_load_3d(smem + sm90_v_box_off(S, st, c), &tmV, &v_full[st], c * 64, hk, krow0 + key0);
        } else {
          mbar_arrive(&v_full[st]);
        }
      }
    }
    return;
  }

  // ------------------------------------------------------------------------------------------
  // Consumer warp groups: rows 64 * cg .. + 63 of the CTA's tile.
  setmaxnreg_inc<kSm90ConsumerRegs>();
  const int cg = wg - 1;
  const int cw = warp & 3, g = lane >> 2, qd = lane & 3;
  // This thread's two rows (accumulator rows g and g + 8 of its warp's 16).
  int ri[2], rlo[2], rhi[2];
  bool rvalid[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    ri[r] = row0 + cg * 64 + cw * 16 + g + 8 * r;
    rvalid[r] = ri[r] < sq;
    if (rvalid[r]) {
      const KeyRange kr = visible_keys(p, ri[r], sq, sk);
      rlo[r] = kr.lo, rhi[r] = kr.hi;
    } else {
      rlo[r] = 1, rhi[r] = 0;
    }
  }

  float o[DP / 2];
  float sc[BN / 2];
  uint32_t pf[BN / 16][4];
#pragma unroll
  for (int i = 0; i < DP / 2; ++i) o[i] = 0.f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) sc[i] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f}, alpha[2] = {0.f, 0.f};

  const bool softcap = p.softcap > 0.f;
  const float sl2 = p.scale * kLog2e;
  const float cap_in = softcap ? p.scale / p.softcap : 0.f, cap_out = p.softcap * kLog2e;

  const uint32_t sbase = smem_u32(smem);
  // S = Q K^T into sc from slot st: k-block kk reads Q chunk kk / 4 (this warp group's 64 rows) and
  // K chunk kk / 4, 32 bytes (16 elements) into the 128-byte row per step.
  auto issue_qk = [&](int st) {
    const int first_scale = MUT == static_cast<int>(Sm90Mutation::stale_scores) ? 1 : 0;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < DP / 16; ++kk) {
      const uint64_t da = gmma_desc(sbase + sm90_q_desc_off(S, cg, kk), kSm90KmajorLBO, kSm90SBO, kSwizzle128B);
      const uint64_t db = gmma_desc(sbase + sm90_k_desc_off(S, st, kk), kSm90KmajorLBO, kSm90SBO, kSwizzle128B);
      mma_qk<T, BN>(sc, da, db, kk == 0 ? first_scale : 1);
    }
    wgmma_commit();
  };
  // O += P V from slot st: k-block kk = keys 16 kk .. 16 kk + 15 (rows of V at 128 bytes), the DP
  // columns in chunks of 64 at LBO = BN * 128 bytes, 8-key groups at SBO = 1024 bytes.
  auto issue_pv = [&](int st) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t db = gmma_desc(sbase + sm90_v_desc_off(S, st, kk), sm90_v_lbo(S), kSm90SBO, kSwizzle128B);
      mma_pv<T, DP>(o, pf[kk], db);
    }
    wgmma_commit();
  };
  const auto release = [&](uint64_t* b_) {
    __syncwarp();
    if (lane == 0) mbar_arrive(b_);
  };
  const auto full_parity = [&](int t) {
    uint32_t par = sm90_full_parity(t, ST);
    if (MUT == static_cast<int>(Sm90Mutation::parity_flip) && t / ST == 1) par ^= 1u;
    return par;
  };
  // Scores of tile t in sc (raw fp32 dot products) -> log2 units, softcap, mask; new row max,
  // alpha = exp2(m_old - m_new) (m_new = -inf counts as 0); sc <- sc - m_new (exp2 arguments).
  const auto softmax_max = [&](int t) {
    const int k0 = kp.kbase + t * BN;
    const bool need_mask = sm90_tile_needs_mask(kp, BN, t);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = sc[4 * j + e];
        x = softcap ? cap_out * tanhf(x * cap_in) : x * sl2;
        if (need_mask) {
          const int key = k0 + 8 * j + 2 * qd + (e & 1);
          const int r = e >> 1;
          if (key < rlo[r] || key > rhi[r]) x = -INFINITY;
        }
        sc[4 * j + e] = x;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(sc[2 * r], sc[2 * r + 1]);
#pragma unroll
      for (int j = 1; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mnew = fmaxf(mrow[r], mx);
      const float muse = mnew == -INFINITY ? 0.f : mnew;
      alpha[r] = exp2f(mrow[r] - muse);
      mrow[r] = mnew;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        sc[4 * j + 2 * r] -= muse;
        sc[4 * j + 2 * r + 1] -= muse;
      }
    }
  };
  // After the previous PV GEMM completed: O *= alpha, P = exp2(sc) into pf (input dtype), row sums.
  const auto softmax_exp = [&]() {
    if (MUT != static_cast<int>(Sm90Mutation::no_o_rescale)) {
#pragma unroll
      for (int j = 0; j < DP / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];
    }
    // P straight into the A fragments; sc keeps the exp2 arguments (the QK^T of the next tile
    // overwrites them: its first k-block has scale-d = 0).
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      float x[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        x[e] = exp2f(sc[8 * kk + e]);
        sum[(e >> 1) & 1] += x[e];
      }
      pf[kk][0] = Ty<T>::pack(x[0], x[1]);
      pf[kk][1] = Ty<T>::pack(x[2], x[3]);
      pf[kk][2] = Ty<T>::pack(x[4], x[5]);
      pf[kk][3] = Ty<T>::pack(x[6], x[7]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) lrow[r] = lrow[r] * alpha[r] + sum[r];
  };

  if (ntiles > 0) {
    mbar_wait(q_full, 0);
    // Tile 0: S_0, softmax.
    mbar_wait(&k_full[0], full_parity(0));
    issue_qk(0);
    wgmma_wait<0>();
    fence_operand(sc);
    release(&k_empty[0]);
    softmax_max(0);
    softmax_exp();
    // Tiles 1 .. n-1: S_t and P_{t-1} V_{t-1} in flight together.
    for (int t = 1; t < ntiles; ++t) {
      const int st = sm90_stage(t, ST), sp = sm90_stage(t - 1, ST);
      mbar_wait(&k_full[st], full_parity(t));
      fence_operand(sc);
      issue_qk(st);
      mbar_wait(&v_full[sp], full_parity(t - 1));
      fence_operand(o);
      issue_pv(sp);
      wgmma_wait<1>();  // S_t done (the older group); PV still running
      fence_operand(sc);
      release(&k_empty[st]);
      softmax_max(t);
      wgmma_wait<0>();
      fence_operand(o);
      release(&v_empty[sp]);
      softmax_exp();
    }
    // Last PV.
    const int sl = sm90_stage(ntiles - 1, ST);
    mbar_wait(&v_full[sl], full_parity(ntiles - 1));
    fence_operand(o);
    issue_pv(sl);
    wgmma_wait<0>();
    fence_operand(o);
    release(&v_empty[sl]);
  }

  // ------------------------------------------------------------------------------------------
  // Epilogue: row sums over the quad, sink, normalise, store O and LSE.
  const bool with_sink = p.sink != nullptr;
  const int qs = q_start(p, b), Dv = p.Dv;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = lrow[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (!rvalid[r]) continue;
    float oscale, lse;
    const float m = mrow[r];
    if (with_sink) {
      const float sx = p.sink[h] * kLog2e;
      const float mf = fmaxf(m, sx);
      const float em = exp2f(m - mf);
      const float lt = l * em + exp2f(sx - mf);
      oscale = em / lt;
      lse = (mf + log2f(lt)) * kLn2;
    } else if (l > 0.f) {
      oscale = 1.f / l;
      lse = (m + log2f(l)) * kLn2;
    } else {
      oscale = 0.f;
      lse = -INFINITY;
    }
    const int64_t qrow = static_cast<int64_t>(qs) + ri[r];
    uint16_t* po = static_cast<uint16_t*>(p.o) + (qrow * p.Hq + h) * Dv;
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) {
      const int col = 8 * j + 2 * qd;
      if (col < Dv)
        *reinterpret_cast<uint32_t*>(po + col) = Ty<T>::pack(o[4 * j + 2 * r] * oscale, o[4 * j + 2 * r + 1] * oscale);
    }
    if (qd == 0) p.lse[lse_index(p, b, h, ri[r])] = lse;
  }
#endif
}

// ---- host side ----

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

cudaError_t make_map(CUtensorMap* map, const void* base, bool fp16, int dim, int heads, int64_t rows, int box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 enc = encode_fn();
  if (!enc) return cudaErrorNotSupported;
  const Sm90TmaParams t = sm90_tma_params(dim, heads, rows, box_rows);
  if (sm90_tma_params_problem(t) != nullptr) return cudaErrorInvalidValue;
  cuuint64_t dims[3] = {t.dims[0], t.dims[1], t.dims[2]};
  cuuint64_t strides[2] = {t.strides[0], t.strides[1]};
  cuuint32_t box[3] = {t.box[0], t.box[1], t.box[2]};
  cuuint32_t es[3] = {t.elem_strides[0], t.elem_strides[1], t.elem_strides[2]};
  const CUresult r = enc(map, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                         const_cast<void*>(base), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <typename T, int DP, int MUT>
cudaError_t launch(const AttnParams& p, int64_t k_rows, cudaStream_t s) {
  constexpr Sm90Shape S = sm90_shape(DP);
  static_assert(S.smem_bytes <= kSm90MaxSmem, "shared memory");
  const int64_t gx = (static_cast<int64_t>(p.max_seqlen_q) + S.BM - 1) / S.BM;
  const int64_t gy = static_cast<int64_t>(p.B) * p.Hq;
  if (gx <= 0 || gy <= 0 || p.total_q <= 0) return cudaSuccess;
  if (gy > 65535 || gx > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const bool fp16 = std::is_same<T, __half>::value;
  CUtensorMap mq, mk, mv;
  cudaError_t e = make_map(&mq, p.q, fp16, p.D, p.Hq, p.total_q, S.BM);
  if (e == cudaSuccess) e = make_map(&mk, p.k, fp16, p.D, p.Hkv, k_rows, S.BN);
  if (e == cudaSuccess) e = make_map(&mv, p.v, fp16, p.Dv, p.Hkv, k_rows, S.BN);
  if (e != cudaSuccess) return e;
  auto kern = attn_sm90_kernel<T, DP, MUT>;
  e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, S.smem_bytes);
  if (e != cudaSuccess) return e;
  kern<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1), kSm90Threads, S.smem_bytes, s>>>(mq, mk, mv, p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_dp(const AttnParams& p, int64_t k_rows, cudaStream_t s) {
  switch (sm90_padded_dim(p.D, p.Dv)) {
    case 64: return launch<T, 64, 0>(p, k_rows, s);
    case 128: return launch<T, 128, 0>(p, k_rows, s);
    case 256: return launch<T, 256, 0>(p, k_rows, s);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_mutant(const AttnParams& p, int64_t k_rows, cudaStream_t s, Sm90Mutation m) {
  if (p.fp16 || sm90_padded_dim(p.D, p.Dv) != 128) return cudaErrorInvalidValue;
  using B = __nv_bfloat16;
  switch (m) {
    case Sm90Mutation::kv_tile0: return launch<B, 128, 1>(p, k_rows, s);
    case Sm90Mutation::stage_stuck: return launch<B, 128, 2>(p, k_rows, s);
    case Sm90Mutation::parity_flip: return launch<B, 128, 3>(p, k_rows, s);
    case Sm90Mutation::stale_scores: return launch<B, 128, 4>(p, k_rows, s);
    case Sm90Mutation::no_o_rescale: return launch<B, 128, 5>(p, k_rows, s);
    default: return cudaErrorInvalidValue;
  }
}

bool aligned16(const void* x) { return (reinterpret_cast<uintptr_t>(x) & 15u) == 0; }

}  // namespace sm90k

cudaError_t attention_fwd_sm90(const AttnParams& p, int64_t k_rows, cudaStream_t s, Sm90Mutation m) {
  if (p.page_size > 0 || p.block_table) return cudaErrorInvalidValue;
  if (sm90_padded_dim(p.D, p.Dv) == 0 || p.D % 8 != 0 || p.Dv % 8 != 0) return cudaErrorInvalidValue;
  if (p.Hkv <= 0 || p.Hq % p.Hkv != 0) return cudaErrorInvalidValue;
  if (!sm90k::aligned16(p.q) || !sm90k::aligned16(p.k) || !sm90k::aligned16(p.v) || !sm90k::aligned16(p.o))
    return cudaErrorInvalidValue;
  int dev = 0, major = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e != cudaSuccess) return e;
  if (major != 9) return cudaErrorNotSupported;  // sm_90a code only
  if (m != Sm90Mutation::none) return sm90k::launch_mutant(p, k_rows, s, m);
  return p.fp16 ? sm90k::launch_dp<__half>(p, k_rows, s) : sm90k::launch_dp<__nv_bfloat16>(p, k_rows, s);
}

}  // namespace assay::kernels::attention
