// Hopper attention forward (sm_90a): TMA loads, a 2-stage mbarrier pipeline, wgmma, one producer
// and two consumer warp groups. Kernel: attention_sm90.cu; registration: attention_sm90.cpp.
// Measured on an H200 (verdicts, sanitizers, mutants, speed): docs/ops/attention.md.
//
// Tensors (golden names; storage codes; shared vocabulary):
//   q    bf16|fp16  dense [B, Sq, Hq, D]  | varlen [total_q, Hq, D] (cu_seqlens_q int32 [B+1])
//   k    bf16|fp16  dense [B, Sk, Hkv, D] | packed [total_k, Hkv, D] (cu_seqlens_k int32 [B+1])
//   v    as k with Dv                       seqused_k int32 [B] (optional), sink fp32 [Hq] (optional)
//   O    dtype of q, as q with Dv           LSE fp32 dense [B, Hq, Sq] | varlen [Hq, total_q]
// Convention: FlashAttention (reference/attention/attention.h): bottom-right causal, inclusive
// windows, GQA h / (Hq / Hkv), softcap, sink in the denominator only, fully masked rows O = 0 /
// LSE = -inf (LSE = sink with a sink), natural-log LSE. Paged K/V is not supported.
//
// This header is the host-computable part (no CUDA headers in the host section; CPU tests in
// kernels/attention/tests/test_attention_sm90_plan.cpp): tile shapes and the shared-memory plan,
// the key-tile walk of one CTA, the TMA tensor-map parameters and the case limits.
#pragma once
#include <cstdint>

#include "kernels/attention/attention_params.h"

namespace assay::kernels::attention {

// Planted defects for the GPU mutants (kernels/mutants/attention_mutants.cpp); none = correct.
enum class Sm90Mutation : int {
  none = 0,
  kv_tile0 = 1,      // producer: the TMA key coordinate of every KV tile is that of the first tile
  stage_stuck = 2,   // producer: the ring's write stage stops at the last stage (no TMA past it)
  parity_flip = 3,   // consumers: the full-barrier phase parity flipped on the second round
  stale_scores = 4,  // consumers: QK^T's first k-block accumulates (wgmma scale-d = 1) into stale S
  no_o_rescale = 5,  // consumers: O not multiplied by exp(m_old - m_new)
};

// Tile shape of one instantiation (padded head dim DP in {64, 128, 256}).
//   BM = 128 query rows per CTA (2 consumer warp groups x 64 rows), BN keys per KV tile (128; 64
//   at DP = 256), STAGES = 2 ring slots for K and for V. Shared memory, each tile a column of
//   DP / 64 chunks of [rows][64] 16-bit elements (128-byte rows, SW128 swizzle, 1024-byte aligned):
//   Q [BM x DP] | K [STAGES][BN x DP] | V [STAGES][BN x DP] | barriers | + 1024 alignment slack.
struct Sm90Shape {
  int DP, BM, BN, stages, chunks;
  int q_bytes, kv_stage_bytes;           // one tile
  int off_k, off_v, off_bar, bar_count;  // byte offsets from the aligned base
  int smem_bytes;                        // dynamic shared memory to request
};
ASSAY_HD constexpr Sm90Shape sm90_shape(int DP) {
  Sm90Shape s{};
  s.DP = DP;
  s.BM = 128;
  s.BN = DP >= 256 ? 64 : 128;
  s.stages = 2;
  s.chunks = DP / 64;
  s.q_bytes = s.BM * DP * 2;
  s.kv_stage_bytes = s.BN * DP * 2;
  s.off_k = s.q_bytes;
  s.off_v = s.off_k + s.stages * s.kv_stage_bytes;
  s.off_bar = s.off_v + s.stages * s.kv_stage_bytes;
  s.bar_count = 1 + 4 * s.stages;  // q_full, k_full[S], k_empty[S], v_full[S], v_empty[S]
  s.smem_bytes = s.off_bar + s.bar_count * 8 + 1024;
  return s;
}
constexpr int kSm90Threads = 384;        // warp group 0: producer; 1, 2: consumers
constexpr int kSm90ConsumerWarps = 8;    // arrivals on an empty barrier
constexpr int kSm90ProducerRegs = 40;    // setmaxnreg: 128 * 40 + 256 * 232 = 64512 <= 65536
constexpr int kSm90ConsumerRegs = 232;
constexpr int kSm90MaxSmem = 227 * 1024;  // sm_90 opt-in maximum per block

// Padded head dim for (D, Dv): 64, 128, 256, or 0 when unsupported.
ASSAY_HD int sm90_padded_dim(int D, int Dv) {
  const int d = D > Dv ? D : Dv;
  if (D < 1 || Dv < 1 || d > 256) return 0;
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

// The key tiles one CTA walks: its rows are row0 .. row_last of a sequence with sq queries and sk
// keys. Tile t covers keys kbase + t * BN .. + BN - 1 (t < ntiles; ntiles = 0: no visible key).
// Keys in [max_lo, min_hi] are visible to every row of the CTA: a tile inside needs no mask.
struct Sm90KvPlan {
  int kbase, ntiles, max_lo, min_hi;
};
ASSAY_HD Sm90KvPlan sm90_kv_plan(const AttnParams& p, int BN, int row0, int row_last, int sq, int sk) {
  Sm90KvPlan kp{0, 0, 0, -1};
  if (sk <= 0 || row0 > row_last) return kp;
  const KeyRange f = visible_keys(p, row0, sq, sk), l = visible_keys(p, row_last, sq, sk);
  const int lo = f.lo, hi = l.hi;  // both bounds are non-decreasing in the row
  kp.max_lo = l.lo, kp.min_hi = f.hi;
  if (lo > hi) return kp;
  kp.kbase = (lo / BN) * BN;
  kp.ntiles = (hi - kp.kbase) / BN + 1;
  return kp;
}
ASSAY_HD bool sm90_tile_needs_mask(const Sm90KvPlan& kp, int BN, int t) {
  const int k0 = kp.kbase + t * BN;
  return !(k0 >= kp.max_lo && k0 + BN - 1 <= kp.min_hi);
}

// Shared-memory byte offsets (from the aligned base) where the wgmma descriptors of k-block kk
// start, and their LBO / SBO (all SW128; kernels/common/sm90_desc.h):
//   Q (A of S = Q K^T, K-major): consumer warp group cg's 64 rows of chunk kk / 4, +32 bytes per
//     k-step of 16 elements inside the 128-byte row; SBO = 1024 (8-row groups), LBO unused (16).
//   K (B of S, K-major, N = BN key rows): slot st, chunk kk / 4, +32 bytes per k-step; SBO = 1024.
//   V (B of O += P V, MN-major: N = DP columns contiguous in 64-element chunks, K = keys): slot
//     st, key rows 16 kk .. (+2048 bytes per k-block), LBO = BN * 128 (next 64-column chunk),
//     SBO = 1024 (next 8 keys).
constexpr uint32_t kSm90SBO = 1024, kSm90KmajorLBO = 16;
ASSAY_HD uint32_t sm90_q_desc_off(const Sm90Shape& s, int cg, int kk) {
  return static_cast<uint32_t>((kk >> 2) * (s.BM * 128) + cg * (64 * 128) + (kk & 3) * 32);
}
ASSAY_HD uint32_t sm90_k_desc_off(const Sm90Shape& s, int st, int kk) {
  return static_cast<uint32_t>(s.off_k + st * s.kv_stage_bytes + (kk >> 2) * (s.BN * 128) + (kk & 3) * 32);
}
ASSAY_HD uint32_t sm90_v_desc_off(const Sm90Shape& s, int st, int kk) {
  return static_cast<uint32_t>(s.off_v + st * s.kv_stage_bytes + kk * (16 * 128));
}
ASSAY_HD uint32_t sm90_v_lbo(const Sm90Shape& s) { return static_cast<uint32_t>(s.BN * 128); }
// Where the producer's TMA box c (64 columns) of a tile lands: Q, K slot st, V slot st.
ASSAY_HD uint32_t sm90_q_box_off(const Sm90Shape& s, int c) { return static_cast<uint32_t>(c * s.BM * 128); }
ASSAY_HD uint32_t sm90_k_box_off(const Sm90Shape& s, int st, int c) {
  return static_cast<uint32_t>(s.off_k + st * s.kv_stage_bytes + c * s.BN * 128);
}
ASSAY_HD uint32_t sm90_v_box_off(const Sm90Shape& s, int st, int c) {
  return static_cast<uint32_t>(s.off_v + st * s.kv_stage_bytes + c * s.BN * 128);
}

// The ring bookkeeping of tile t (t-th tile of the CTA's walk): slot and round; a consumer waits
// for phase parity (round & 1) of the slot's full barrier, the producer for parity
// ((round & 1) ^ 1) of its empty barrier (so its first pass does not block).
ASSAY_HD int sm90_stage(int t, int stages) { return t % stages; }
ASSAY_HD uint32_t sm90_full_parity(int t, int stages) { return static_cast<uint32_t>((t / stages) & 1); }
ASSAY_HD uint32_t sm90_empty_parity(int t, int stages) { return static_cast<uint32_t>(((t / stages) & 1) ^ 1); }

// Parameters of one cuTensorMapEncodeTiled call (rank 3, 16-bit elements): a [rows, heads, dim]
// row-major tensor seen as dims {dim, heads, rows} (innermost first), byte strides of dims 1 and
// 2, box {64, 1, box_rows}, element strides 1, SWIZZLE_128B, OOB fill zero.
struct Sm90TmaParams {
  uint64_t dims[3];
  uint64_t strides[2];  // bytes, of dims 1 and 2
  uint32_t box[3];
  uint32_t elem_strides[3];
};
inline Sm90TmaParams sm90_tma_params(int dim, int heads, int64_t rows, int box_rows) {
  Sm90TmaParams t{};
  t.dims[0] = static_cast<uint64_t>(dim);
  t.dims[1] = static_cast<uint64_t>(heads);
  t.dims[2] = static_cast<uint64_t>(rows);
  t.strides[0] = static_cast<uint64_t>(dim) * 2u;
  t.strides[1] = static_cast<uint64_t>(heads) * static_cast<uint64_t>(dim) * 2u;
  t.box[0] = 64, t.box[1] = 1, t.box[2] = static_cast<uint32_t>(box_rows);
  t.elem_strides[0] = t.elem_strides[1] = t.elem_strides[2] = 1;
  return t;
}

}  // namespace assay::kernels::attention

namespace assay::kernels::attention {

// The constraints cuTensorMapEncodeTiled documents for these parameters (rank 3, 16-bit elements,
// SWIZZLE_128B, INTERLEAVE_NONE; the global address's 16-byte alignment is checked at launch):
// nullptr if they hold, else the first violated one.
inline const char* sm90_tma_params_problem(const Sm90TmaParams& t) {
  for (int i = 0; i < 3; ++i)
    if (t.dims[i] < 1 || t.dims[i] > (uint64_t{1} << 32)) return "globalDim out of [1, 2^32]";
  for (int i = 0; i < 2; ++i) {
    if (t.strides[i] % 16 != 0) return "globalStrides not a multiple of 16 bytes";
    if (t.strides[i] >= (uint64_t{1} << 40)) return "globalStrides >= 2^40";
  }
  if (t.strides[1] < t.strides[0] * t.dims[1]) return "globalStrides overlap (dim 2 < dim 1 * its extent)";
  for (int i = 0; i < 3; ++i) {
    if (t.box[i] < 1 || t.box[i] > 256) return "boxDim out of [1, 256]";
    if (t.elem_strides[i] < 1 || t.elem_strides[i] > 8) return "elementStrides out of [1, 8]";
  }
  if ((t.box[0] * 2u) % 16u != 0) return "boxDim[0] * element size not a multiple of 16 bytes";
  if (t.box[0] * 2u > 128u) return "SWIZZLE_128B: boxDim[0] * element size > 128 bytes";
  return nullptr;
}

}  // namespace assay::kernels::attention

#if !defined(__CUDACC__) || defined(ASSAY_ATTENTION_HOST)
#include <string>

#include <fmt/format.h>

namespace assay::kernels::attention {

// The sm90 kernel's limits on a case (beyond forward_case_supported): "" or the reason.
inline std::string sm90_case_limits(const CaseDims& d) {
  if (d.paged) return "paged K/V: the sm90 kernel loads contiguous key tiles with TMA (no page gather)";
  if (d.D % 8 != 0 || d.Dv % 8 != 0)
    return fmt::format("D = {}, Dv = {}: TMA needs row strides of 16-byte multiples (D, Dv multiples of 8)", d.D, d.Dv);
  if (sm90_padded_dim(d.D, d.Dv) == 0) return fmt::format("D = {}, Dv = {}: head dims above 256", d.D, d.Dv);
  if (static_cast<long long>(d.B) * d.Hq > 65535) return "B * Hq > 65535 (grid.y)";
  if (static_cast<long long>(d.total_q) >= (1ll << 31)) return "more than 2^31 query rows (TMA coordinates are int32)";
  if (!d.packed_k && static_cast<long long>(d.B) * d.Sk >= (1ll << 31))
    return "more than 2^31 key rows (TMA coordinates are int32)";
  return {};
}

}  // namespace assay::kernels::attention
#endif

#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
namespace assay::kernels::attention {
// Launch on stream s. k_rows: rows of the k / v tensors (dense B * Sk, packed total_k). Needs an
// sm_90 device, 16-byte aligned q / k / v, D and Dv multiples of 8, no paging (cudaErrorInvalidValue
// otherwise; cudaErrorNotSupported without the driver's cuTensorMapEncodeTiled or off sm_90).
// Writes O and LSE directly (ignores num_splits). Mutations other than none: bf16, DP = 128 only.
cudaError_t attention_fwd_sm90(const AttnParams& p, int64_t k_rows, cudaStream_t s,
                               Sm90Mutation m = Sm90Mutation::none);
}  // namespace assay::kernels::attention
#endif
