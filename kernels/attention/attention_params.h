// Attention forward kernels: the launch parameters every kernel in kernels/attention/ shares,
// and the device-side index helpers (sequence lengths, row pointers, visible key ranges).
//
// Conventions: reference/attention/attention.h (FlashAttention @ 0251105a2fb1). In short:
//   scores s_ij = scale * <q_i, k_j>; softcap: s = softcap * tanh(s / softcap) before masking;
//   GQA: query head h reads KV head h / (Hq / Hkv); causal is BOTTOM-RIGHT and is the window
//   (left, 0); window bounds inclusive, -1 unbounded; the sink logit (natural log, per query head,
//   not scaled or softcapped) joins the denominator only; fully masked rows: O = 0, LSE = -inf;
//   LSE natural log; split-KV: n_tiles = ceil(sk / tile_n) cut into num_splits contiguous groups
//   of ceil(n_tiles / num_splits) tiles, partials in fp32, LSE-weighted combine.
//
// Tensors (golden names; storage codes; shared vocabulary):
//   q        bf16|fp16  dense [B, Sq, Hq, D]   varlen [total_q, Hq, D] (with cu_seqlens_q)
//   k        bf16|fp16  dense [B, Sk, Hkv, D]  packed [total_k, Hkv, D] (with cu_seqlens_k)
//                       paged [num_pages, page_size, Hkv, D] (with block_table)
//   v        as k with Dv
//   sink     fp32 [Hq]                         (optional)
//   cu_seqlens_q int32 [B+1], cu_seqlens_k int32 [B+1], seqused_k int32 [B],
//   block_table int32 [B, pages_per_seq]       (optional)
//   O        as q with Dv, dtype of q          LSE fp32 dense [B, Hq, Sq]  varlen [Hq, total_q]
// Key count of sequence b: seqused_k[b], else cu_seqlens_k[b+1] - cu_seqlens_k[b], else Sk.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define ASSAY_HD __host__ __device__ __forceinline__
#else
#define ASSAY_HD inline
#endif

namespace assay::kernels::attention {

struct AttnParams {
  // Device pointers (storage codes). Optional ones are null when the case lacks them.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* sink = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqused_k = nullptr;
  const int32_t* block_table = nullptr;

  bool fp16 = false;  // q/k/v/O dtype: false = bf16, true = fp16
  int B = 1, Hq = 1, Hkv = 1, D = 0, Dv = 0;
  int Sq = 0;         // dense query length (unused with cu_seqlens_q)
  int Sk = 0;         // dense key capacity per sequence (unused with cu_seqlens_k / paging)
  int total_q = 0;    // rows of q: B * Sq dense, cu_seqlens_q[B] varlen (from the case fields)
  int max_seqlen_q = 0, max_seqlen_k = 0;  // host-side upper bounds for grid sizing

  float scale = 1.f;        // softmax scale (case `scale`, default 1/sqrt(D))
  float softcap = 0.f;      // 0 = off
  bool causal = false;
  int window_left = -1, window_right = -1;  // inclusive, -1 = unbounded; causal forces right = 0

  int page_size = 0;        // > 0: paged K/V
  int pages_per_seq = 0;    // block_table row length

  // Split-KV: tile_n keys per KV tile for the split scheme, num_splits >= 1. The launcher owns the
  // fp32 partial buffers, indexed by the global query row r = q_start(b) + i:
  //   o_partial [num_splits, total_q, Hq, Dv], lse_partial [num_splits, total_q, Hq]
  // (an empty split writes O = 0, LSE = -inf; kernels/attention/attention_combine.h combines).
  int tile_n = 64;
  int num_splits = 1;
  float* o_partial = nullptr;
  float* lse_partial = nullptr;
  // Optional copies of the partials in the golden's intermediate layouts (O_partial
  // [num_splits, <O layout>], LSE_partial [num_splits, <LSE layout>]), written when non-null.
  float* o_partial_export = nullptr;
  float* lse_partial_export = nullptr;
  // Test-only (kernels/mutants/): >= 1 replaces split corrupt_split's partials with split 0's
  // before the export and the combine, as a split whose KV range restarted at split 0's keys.
  int corrupt_split = -1;

  // ---- element strides (in elements of the storage dtype) ----
  int64_t q_row_stride() const { return static_cast<int64_t>(Hq) * D; }       // one token
  int64_t kv_row_stride_k() const { return static_cast<int64_t>(Hkv) * D; }
  int64_t kv_row_stride_v() const { return static_cast<int64_t>(Hkv) * Dv; }
  int64_t o_row_stride() const { return static_cast<int64_t>(Hq) * Dv; }
};

// Number of query rows of sequence b and the global row index of its first query.
ASSAY_HD int seqlen_q(const AttnParams& p, int b) {
  return p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.Sq;
}
ASSAY_HD int q_start(const AttnParams& p, int b) { return p.cu_seqlens_q ? p.cu_seqlens_q[b] : b * p.Sq; }

// Number of keys of sequence b.
ASSAY_HD int seqlen_k(const AttnParams& p, int b) {
  if (p.seqused_k) return p.seqused_k[b];
  if (p.cu_seqlens_k) return p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
  return p.Sk;
}

// Element offset of key/value token j of sequence b (head 0, element 0), in units of
// row_stride (= Hkv*D for K, Hkv*Dv for V): paged -> block_table, packed -> cu_seqlens_k, dense.
ASSAY_HD int64_t kv_token_index(const AttnParams& p, int b, int j) {
  if (p.page_size > 0) {
    const int page = p.block_table[static_cast<int64_t>(b) * p.pages_per_seq + j / p.page_size];
    return static_cast<int64_t>(page) * p.page_size + j % p.page_size;
  }
  if (p.cu_seqlens_k) return static_cast<int64_t>(p.cu_seqlens_k[b]) + j;
  return static_cast<int64_t>(b) * p.Sk + j;
}

// KV head read by query head h (contiguous GQA groups).
ASSAY_HD int kv_head(const AttnParams& p, int h) { return h / (p.Hq / p.Hkv); }

// LSE element of (sequence b, head h, query row i of that sequence).
ASSAY_HD int64_t lse_index(const AttnParams& p, int b, int h, int i) {
  if (p.cu_seqlens_q) return static_cast<int64_t>(h) * p.total_q + p.cu_seqlens_q[b] + i;
  return (static_cast<int64_t>(b) * p.Hq + h) * p.Sq + i;
}

// Inclusive range [lo, hi] of keys visible to query row i (0-based within its sequence) of a
// sequence with sq queries and sk keys; empty when lo > hi.
struct KeyRange {
  int lo, hi;
};
ASSAY_HD KeyRange visible_keys(const AttnParams& p, int i, int sq, int sk) {
  const int diag = i + sk - sq;  // bottom-right alignment
  int lo = 0, hi = sk - 1;
  if (p.window_left >= 0) lo = diag - p.window_left > 0 ? diag - p.window_left : 0;
  const int right = p.causal ? 0 : p.window_right;
  if (right >= 0) hi = diag + right < sk - 1 ? diag + right : sk - 1;
  return {lo, hi};
}

// Split-KV scheme: KV tiles of tile_n keys, split s covers tiles [s*per, min((s+1)*per, n_tiles)).
ASSAY_HD int n_kv_tiles(const AttnParams& p, int sk) { return (sk + p.tile_n - 1) / p.tile_n; }
ASSAY_HD int tiles_per_split(const AttnParams& p, int sk) {
  const int n = n_kv_tiles(p, sk);
  return (n + p.num_splits - 1) / p.num_splits;
}

}  // namespace assay::kernels::attention

#if !defined(__CUDACC__) || defined(ASSAY_ATTENTION_HOST)
#include <string>
#include <vector>

#include "kernels/registry.h"

namespace assay::kernels::attention {

// Fills p from a launch context: pointers, dims, layout and case fields (scale, causal, window,
// softcap, page_size, tile_n, num_splits, seqlens_q/seqlens_k for total_q and the max lengths).
// Partial buffers stay null (the launcher allocates them). Returns "" or a one-line error.
std::string build_params(const LaunchContext& c, AttnParams& p);
// attention_fwd_v2_split on a launch context (attention.cpp): also exports the split partials into
// c's intermediates LSE_partial / O_partial when present; corrupt_split >= 1 only for the test
// mutant (AttnParams::corrupt_split). Returns "" or the error, prefixed with `name`.
std::string run_split_kernel(LaunchContext& c, const char* name, int corrupt_split);

// The checks every forward kernel shares: a forward case (no backward outputs), q/k/v of one
// dtype in {bf16, fp16}, O of the same dtype, LSE fp32, Hq % Hkv == 0. Kernel-specific limits
// (head dims, Sq for decode) are added by each kernel's can_implement.
Support forward_case_supported(const KernelCase& g);

// Dimensions of a golden's case, from tensor shapes and case fields (no values read).
struct CaseDims {
  int B = 1, Hq = 1, Hkv = 1, D = 0, Dv = 0, Sq = 0, Sk = 0, total_q = 0, max_seqlen_q = 0, max_seqlen_k = 0;
  int page_size = 0, num_splits = 1, tile_n = 64;
  bool varlen_q = false, paged = false, packed_k = false, has_sink = false, softcap = false, causal = false,
       window = false;
};
CaseDims case_dims(const KernelCase& g);

}  // namespace assay::kernels::attention
#endif
