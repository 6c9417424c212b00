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
// Implementation: the kernel templates, compiled only by attention_fwd.cu (bf16 instantiations and
// the v2 launchers) and attention_decode.cu (fp16 instantiations and the v3 launcher), so that the
// two halves build in parallel. attention_fwd_mainloop.cuh: device primitives, tile loads, the KV
// mainloop and the row normalisation; attention_fwd_kernels.cuh: the prefill and decode kernels
// and their launch templates.
#if defined(__CUDACC__) && defined(ASSAY_ATTENTION_FWD_IMPL)
#include "kernels/attention/attention_fwd_mainloop.cuh"
#include "kernels/attention/attention_fwd_kernels.cuh"
#endif
