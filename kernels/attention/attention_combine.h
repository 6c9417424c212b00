// Split-KV combine for the attention forward kernels (FlashAttention `attention_combine_ref`,
// spec 9; reference/attention/attention.h `combine_splits`).
//
// Tensors (AttnParams fields; global query row r = q_start(b) + i):
//   p.o_partial    fp32 [num_splits, total_q, Hq, Dv]   partial O of each split (empty split: 0)
//   p.lse_partial  fp32 [num_splits, total_q, Hq]       partial LSE, natural log (empty: -inf)
//   -> p.o         bf16|fp16 (p.fp16) layout of q with Dv: dense [B, Sq, Hq, Dv] | varlen [total_q, Hq, Dv]
//      p.lse       fp32 dense [B, Hq, Sq] | varlen [Hq, total_q]   (lse_index)
// Math per (r, h): lse = logsumexp_s lse_s (every lse_s = -inf -> -inf), w_s = exp(lse_s - lse)
// with NaN / inf weights forced to 0, O = sum_s w_s O_s (0 when every split is empty). The sink,
// if any, is already folded into split 0 by the split kernel. Deterministic (fixed split order).
//
// Variants: v1 only (one warp per (row, head), fp32, splits summed in order).
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/attention_params.h"

namespace assay::kernels::attention {

// Enqueues the combine on s. mutant_fp16_partials (test-only, kernels/mutants/) rounds every
// partial O and LSE through fp16 before combining: the "fp16 partial buffers" bug class.
cudaError_t launch_attention_combine(const AttnParams& p, cudaStream_t s, bool mutant_fp16_partials = false);

// The split partials in the golden's intermediate layouts (for `assay bisect`): copies
// p.lse_partial [num_splits, total_q, Hq] to dst [num_splits, <LSE layout>] (dense
// [num_splits, B, Hq, Sq], varlen [num_splits, Hq, total_q]). O partials need no transpose: their
// golden layout [num_splits, <O layout>] is the workspace's.
cudaError_t launch_export_lse_partials(const AttnParams& p, float* dst, cudaStream_t s);

}  // namespace assay::kernels::attention
