// Attention oracle: softmax attention forward (O, LSE), split-KV partials and their combine,
// backward (dQ, dK, dV, dSink), and per-element error-bound magnitudes. All arithmetic in fp64.
//
// Two forms, built independently, cross-checked to <= 1e-12 (assay::agreement_rel):
//   (a) definitional  (attention_definitional.cpp): complete score rows (all sk keys), a tile of 64
//       query rows at a time so memory stays O(64 sk) per thread (never Sq x Sk): the rows' dot
//       products as one product Q_tile K^T, the FlashAttention test mask (`construct_local_mask`) per
//       element, a three-pass softmax (max, sum, divide) over each full row including the sink
//       column (std::exp), then P V over the full rows. Parallel over (batch, head, query tile).
//       Backward from the full P and dP rows with Delta = rowsum(P o dP) (scalar loops, one row at a
//       time, parallel over KV heads).
//   (b) online         (attention_online.cpp): the kernel algorithm. Query tiles of tile_m rows,
//       KV tiles of tile_n keys (packed once per call through the page table, like the tiles a TMA
//       load brings to shared memory), tile skipping from per-row visible key ranges, running row
//       max, running row sum and O rescale per tile, the two products per tile as FMA register-tile
//       kernels (attention_tiles.h: one fused multiply-add chain per element, the same bits on
//       every ISA), the sink folded in at finalize; optionally split-KV partials (O_i, LSE_i) and
//       their LSE-weighted combine. Its exp
//       is its own vectorised one (within 1 ulp of glibc's), so the forms share no exp. Parallel
//       over (batch, head, query tile). Backward FA2-style: preprocess Delta = rowsum(dO o O), then
//       KV-tile-outer loops that recompute P = exp(S - LSE) from the stored LSE.
//   Neither result depends on the OpenMP thread count: work items own their outputs, every sum has
//   a fixed order, and a BLAS GEMM never splits its K reduction across threads.
//
// Conventions (FlashAttention, Dao-AILab/flash-attention @ 0251105a2fb1):
//   * Scores  s_ij = scale * <q_i, k_j>, scale defaults to 1/sqrt(D). Softcap (softcap > 0):
//     s_ij = softcap * tanh(s_ij / softcap), applied to the scaled scores before masking (spec 4.6).
//   * GQA / MQA: query head h reads KV head h / (Hq / Hkv) (contiguous groups, never h % Hkv) (spec 2).
//   * Causal is BOTTOM-RIGHT aligned: query row i of a sequence with sq queries and sk keys sees key
//     j iff j <= i + sk - sq (spec 4.1, FA >= 2.1). Causal is the window (left, 0): with causal the
//     right bound is forced to 0 (FA's interface does the same), the left bound stays as given.
//   * Sliding window (left, right), INCLUSIVE bounds, -1 = unbounded on that side:
//     row i sees key j iff  0 <= j < sk,  (left < 0 or j >= i + sk - sq - left)  and
//                           (right < 0 or j <= i + sk - sq + right)            (spec 4.2).
//     In varlen / KV-cache mode sq and sk are the per-sequence lengths.
//     (FA's construct_local_mask also clamps the right bound at sk; that clamp is implied by j < sk.
//     One-sided windows: FA's C++ API turns a negative side into "seqlen_k", i.e. unbounded; the
//     Python test helper special-cases only left < 0. We follow the API: each side independently.)
//   * Learnable sink (gpt-oss / FA4 `learnable_sink`, one logit per QUERY head, natural-log units,
//     NOT multiplied by scale and NOT softcapped): with m = max(max_j s_ij, sink_h),
//       P_ij = exp(s_ij - m) / (sum_j exp(s_ij - m) + exp(sink_h - m)),
//       LSE_i = m + log(sum_j exp(s_ij - m) + exp(sink_h - m)).
//     It joins the denominator only (no value vector). A row with no visible key then has P = 0,
//     O = 0 and LSE = sink_h (spec 4.5).
//   * Fully masked rows (no visible key, no sink): O = 0 and LSE = -inf (spec 4.8; FA's attention_ref
//     and FA4). Rows with sq > sk under causal (the first sq - sk rows), windows outside [0, sk), and
//     sk = 0 are such rows. Kernels differ in the LSE they STORE there: FA2 / FA3 softmax.h write
//     +INFINITY in the non-split path and -INFINITY in split partials; the oracle always gives -inf.
//   * LSE units: NATURAL log of the softmax normaliser of the scaled (softcapped, masked) scores, i.e.
//     LSE_i = log sum_j exp(s_ij) (+ the sink term); the same quantity as FA's `softmax_lse`
//     (kernels work in log2 internally but return natural-log LSE). Layout as FA's README:
//     dense [B, Hq, Sq]; varlen [Hq, total_q].
//   * Split-KV (spec 9): the KV tiles [0, ceil(sk / tile_n)) of a sequence are cut into num_splits
//     contiguous groups of ceil(n_tiles / num_splits) tiles (FA's n_blocks_per_split); split s covers
//     tiles [s * per, min((s + 1) * per, n_tiles)). Splits past the end are empty: O_s = 0,
//     LSE_s = -inf. Our convention for the sink: it is folded into split 0 only, so the standard
//     sink-free combine  lse = logsumexp_s(lse_s),  w_s = exp(lse_s - lse) (NaN/inf -> 0),
//     O = sum_s w_s O_s  reproduces the unsplit O and LSE. Only the combined result is
//     convention-free; a kernel with another split scheme matches the partials only if its scheme
//     is the same.
//   * Paged KV (spec 7): token p of sequence b lives in page block_table[b][p / page_size] at offset
//     p % page_size. Any page_size >= 1 (1 and non-powers of two allowed). A sequence that needs more
//     pages than a block_table row holds is an InputError (the #2709 capacity contract); exactly at
//     capacity is fine. Block-table entries past the pages a sequence needs are never read.
//   * Not modelled (spec sections in brackets): ALiBi [4.7], dropout [5], chunked attention [4.3],
//     StreamingLLM sink tokens [4.4], key left-padding [4.2], the FA3 / FA4 `qv` term [3], fp8
//     descale factors [1] (a fixture passes already-dequantised values), KV-cache append / rotary
//     [8], top-k gather [1], query padding masks (use varlen instead).
//
// Tensors (fp64 values; the storage dtype of a fixture is applied before the call by rounding the
// inputs). Shared vocabulary: B batch, Sq/Sk lengths, Hq/Hkv heads, D head dim of Q/K, Dv of V/O.
//   q      dense [B, Sq, Hq, D]                varlen (cu_seqlens_q) [total_q, Hq, D]
//   k      dense [B, Sk, Hkv, D]               packed (cu_seqlens_k) [total_k, Hkv, D]
//                                              paged (page_size > 0) [num_pages, page_size, Hkv, D]
//   v      as k with Dv
//   sink   [Hq]   (only when has_sink)
//   o      as q with Dv                        dout: as o
//   lse    dense [B, Hq, Sq]                   varlen [Hq, total_q]        dlse: as lse (optional)
//   o_partial   [num_splits, <o layout>]       lse_partial [num_splits, <lse layout>]
//   dq as q, dk as k, dv as v (same storage layout; positions no sequence reads stay 0; a page that
//   several sequences share accumulates all of their gradients), dsink [Hq].
// Key lengths per sequence: seqused_k[b] if given (FA3 `seqused_k` / kvcache `cache_seqlens`),
// else cu_seqlens_k[b+1] - cu_seqlens_k[b] if given, else Sk. Query lengths: cu_seqlens_q diffs or Sq.
//
// Per-element error-bound magnitudes (form (a); docs/DESIGN.md "Oracles emit magnitudes"; a tolerance
// can then be  |kernel - ref| <= c_dtype * u_dtype * mag + floor). Notation: a_ij = |scale| sum_d |q_id k_jd|
// (the absolute dot product), t'_ij = 1 - tanh^2(x_ij / softcap) (1 without softcap),
// c_ij = t'_ij a_ij + (softcap > 0 ? |s_ij| : 0) (the magnitude of the score computation),
// P_i,sink = exp(sink_h - LSE_i):
//   o_mag[i,e]       = sum_j P_ij |v_je|                     (rounding of the P V product / of P)
//   o_score_mag[i,e] = sum_j P_ij c_ij |v_je - o_ie|         (score errors propagated through softmax:
//                                                             dO_i = sum_j P_ij ds_ij (v_j - o_i))
//   lse_mag[i]       = |m_i| + log(l_i) + sum_j P_ij c_ij    (m_i row max incl. sink, l_i = sum exp(s-m))
//   dv_mag[j,e]      = sum_{h in group, i} P_ij |dO_ie|
//   g_ij             = P_ij (sum_e |dO_ie v_je| + dabs_i + |dLSE_i|) t'_ij,
//                      dabs_i = sum_j P_ij sum_e |dO_ie v_je|      (magnitude of dX_ij)
//   dq_mag[i,d]      = |scale| sum_j g_ij |k_jd|
//   dk_mag[j,d]      = |scale| sum_{h in group, i} g_ij |q_id|
//   dsink_mag[h]     = sum_{b,i} P_i,sink (dabs_i + |dLSE_i|)
// Fully masked rows have all magnitudes 0 (their outputs are exact zeros).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/core/tensor.h"

namespace assay::attention {

// Deliberately broken variants of form (b), for the CPU mutant kill matrix only (docs/DESIGN.md
// "Mutants and emulations"). Each one is a bug class that real attention kernels have shipped.
enum class Mutant {
  none,
  first_kv_tile_only,   // the KV loop stops after its first tile
  no_o_rescale,         // O accumulator not rescaled when the running max grows (l still is)
  no_max_subtraction,   // exp(s) without the running max: overflows (fp32 exp, s > ~88.7)
  gqa_modulo,           // KV head h % Hkv instead of h / (Hq / Hkv)
  causal_top_left,      // causal / window aligned top-left (FA < 2.1): offset sk - sq dropped
  window_exclusive,     // window bounds exclusive instead of inclusive
  no_sink,              // the learnable sink is ignored
  tail_unmasked,        // the last partial KV tile is not masked: keys past sk read as zero vectors
  combine_unweighted,   // split combine averages the non-empty partials instead of LSE weights
  // The TMA / mbarrier / wgmma defect classes of a Hopper kernel (kernels/attention/attention_sm90.cu
  // and its GPU mutants), in form (b)'s schedule: tiles nb, nb + 1, ... of a query tile's walk.
  kv_tile_pinned,       // every KV tile reads the first tile's keys / values (masks as its own)
  ring_no_wrap,         // a 2-slot ring that never wraps: tile nb + t reads tile nb + t % 2's data
  ring_stale_round,     // the ring's second round reads stale slots: tiles nb + 2, nb + 3 read nb, nb + 1
  stale_scores,         // S of each tile accumulates onto the previous tile's exp2 arguments
                        // log2(e) (s - m) (a wgmma whose first k-block kept scale-d = 1)
};

struct Params {
  // Dimensions. Dense Q: [B, Sq, Hq, D]; dense K/V capacity Sk per sequence.
  int64_t B = 1, Sq = 0, Sk = 0, Hq = 1, Hkv = 1, D = 0, Dv = 0;
  std::optional<double> scale;  // softmax scale; default 1/sqrt(D)
  bool causal = false;
  int64_t window_left = -1, window_right = -1;  // inclusive; -1 unbounded
  double softcap = 0;                           // 0: off
  bool has_sink = false;                        // learnable per-query-head sink logits

  // Varlen / KV cache / paging (all optional).
  std::vector<int32_t> cu_seqlens_q;  // [B + 1]: Q, O, LSE packed over total_q = cu_seqlens_q[B]
  std::vector<int32_t> cu_seqlens_k;  // [B + 1]: K/V packed (or, with paging, key lengths only)
  std::vector<int32_t> seqused_k;     // [B]: keys used per sequence (<= capacity)
  int64_t page_size = 0;              // > 0: paged K/V [num_pages, page_size, Hkv, D]
  int64_t num_pages = 0;
  int64_t pages_per_seq = 0;          // row length of block_table
  std::vector<int32_t> block_table;   // [B, pages_per_seq]

  // Form (b) schedule. The result does not depend on these beyond rounding (and the split
  // partials on the split scheme).
  int64_t tile_m = 64;    // query rows per tile
  int64_t tile_n = 64;    // keys per KV tile
  int64_t num_splits = 1; // split-KV partials (>= 1)
  Mutant mutant = Mutant::none;  // form (b) only; calibration use only
};

struct ForwardResult {
  std::vector<double> o, lse;
  // Form (a) only: error-bound magnitudes (definitions above), layouts of o / lse.
  std::vector<double> o_mag, o_score_mag, lse_mag;
  // Form (b), num_splits > 1 only: the split-KV partials, their o_mag / lse_mag (definitions above)
  // over each split's keys (the sink, like the partial itself, in split 0 only), and their combine;
  // layouts of the partials, and of o / lse for the combine. Empty with one split: its partial is
  // the unsplit pass o / lse, and its combine is o / lse again (weight exp(0) = 1 wherever LSE is
  // finite or -inf).
  std::vector<double> o_partial, lse_partial;
  std::vector<double> o_partial_mag, lse_partial_mag;
  std::vector<double> o_combined, lse_combined;
};

struct BackwardResult {
  std::vector<double> dq, dk, dv, dsink;
  // Form (a) only: error-bound magnitudes, layouts of dq / dk / dv / dsink.
  std::vector<double> dq_mag, dk_mag, dv_mag, dsink_mag;
};

// ---------------------------------------------------------------------------------------------
// Form (a): definitional forward.
//   q [B,Sq,Hq,D] | [total_q,Hq,D]; k [B,Sk,Hkv,D] | [total_k,Hkv,D] | [num_pages,page_size,Hkv,D];
//   v as k with Dv; sink [Hq] (empty when !has_sink). All fp64.
//   -> o [.., Hq, Dv] (layout of q), lse [B,Hq,Sq] | [Hq,total_q], plus o_mag, o_score_mag, lse_mag.
// Preconditions (InputError otherwise): Hq % Hkv == 0, D, Dv >= 1, sizes match the layouts, cu_seqlens
// non-decreasing from 0, seqused_k within capacity, block-table capacity and page ids in range.
ForwardResult forward_definitional(const Params& p, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const std::vector<double>& sink);

// Form (b): online-softmax forward over KV tiles (same tensors as above). Emits o / lse from one
// unsplit pass and, when p.num_splits > 1, o_partial / lse_partial for the splits and o_combined /
// lse_combined = combine_splits(p, o_partial, lse_partial).
ForwardResult forward_online(const Params& p, const std::vector<double>& q,
                             const std::vector<double>& k, const std::vector<double>& v,
                             const std::vector<double>& sink);

// The LSE-weighted split combine (FA `attention_combine_ref`, spec 9):
//   o_partial [num_splits, <o layout>], lse_partial [num_splits, <lse layout>] (fp64)
//   -> {o, lse}: lse = logsumexp_s lse_s (all -inf -> -inf), w_s = exp(lse_s - lse) with NaN/inf
//   weights forced to 0, o = sum_s w_s o_s (0 when every split is empty).
struct Combined {
  std::vector<double> o, lse;
};
Combined combine_splits(const Params& p, int64_t num_splits, const std::vector<double>& o_partial,
                        const std::vector<double>& lse_partial);

// Backward, form (a): definitional, from the full P. dout has the layout of o; dlse the layout of
// lse or empty (= 0); dlse at rows whose LSE is -inf is ignored (the LSE is constant there).
// The gradient is of  L = <dout, O> + <dlse, LSE>  w.r.t. q, k, v and sink.
// -> dq (layout of q), dk / dv (layouts of k / v), dsink [Hq] (empty when !has_sink), and the
//    magnitudes dq_mag, dk_mag, dv_mag, dsink_mag.
BackwardResult backward_definitional(const Params& p, const std::vector<double>& q,
                                     const std::vector<double>& k, const std::vector<double>& v,
                                     const std::vector<double>& sink,
                                     const std::vector<double>& dout,
                                     const std::vector<double>& dlse);

// Backward, form (b): FA2-style tiled recompute from the forward's o and lse (as returned by either
// form). Same outputs as above, without magnitudes.
BackwardResult backward_tiled(const Params& p, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& sink, const std::vector<double>& o,
                              const std::vector<double>& lse, const std::vector<double>& dout,
                              const std::vector<double>& dlse);

// ---------------------------------------------------------------------------------------------
// Golden assembly (attention_golden.cpp): runs both forms, measures their agreement and packages
// the result for `assay gen`. Inputs as above; dout / dlse select the backward:
//   dout != nullptr   loss <dout, O> (input dO)
//   dlse != nullptr   loss <dlse, LSE> only (input dLSE): dout = 0, and dV must come out exactly 0
//   both null         forward only; both set is an InputError.
// Outputs: O (dtype o_dtype, bound o_mag), LSE (f32, bound lse_mag, non-finite allowed where a row
// is fully masked), with a backward dQ / dK / dV (dq_dtype / dk_dtype / dv_dtype, bounds dq_mag ...)
// and, with a sink, dSink (f32, bound dsink_mag); every value from form (a).
// Agreement (form (a) vs form (b)): O and LSE "definitional" vs "online" and vs
// "online_split_combine" (the combined split partials; with one split the unsplit pass);
// dQ, dK, dV (, dSink) "definitional" vs "tiled" (backward_tiled from form (b)'s O and LSE).
// Intermediates: LSE_partial (f32, num_splits > 1, bound lse_partial_mag); O_partial (f32, with
// store_o_partial and num_splits > 1, bound o_partial_mag); O_score_mag (f64, with
// store_o_score_mag).
struct GoldenInputs {
  const std::vector<double>& q;
  const std::vector<double>& k;
  const std::vector<double>& v;
  const std::vector<double>& sink;          // empty when !has_sink
  const std::vector<double>* dout = nullptr;
  const std::vector<double>* dlse = nullptr;
};
struct GoldenOptions {
  DType o_dtype = DType::bf16;  // kernel-facing dtypes of the outputs
  DType dq_dtype = DType::bf16, dk_dtype = DType::bf16, dv_dtype = DType::bf16;
  bool store_o_partial = false;    // O-sized intermediates cost golden size: only on request
  bool store_o_score_mag = false;
};
OracleResult oracle(const Params& p, const GoldenInputs& in, const GoldenOptions& opt);

// Shapes and axis names of every tensor for these params (for bindings and goldens).
struct Shapes {
  Shape q, k, v, sink, o, lse, o_partial, lse_partial;
  std::vector<std::string> q_axes, k_axes, v_axes, sink_axes, o_axes, lse_axes, o_partial_axes,
      lse_partial_axes;
};
Shapes shapes(const Params& p);

// Resolved scale (p.scale or 1/sqrt(D)).
double resolved_scale(const Params& p);

}  // namespace assay::attention
