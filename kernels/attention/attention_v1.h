// attention_v1: the readable baseline attention forward (scalar fp32, shared-memory tiles, online
// softmax), and its deliberately broken variants for the test-only mutant plugin.
//
// Tensors (golden names, storage codes; see attention_params.h):
//   q  bf16|fp16 dense [B, Sq, Hq, D] | varlen [total_q, Hq, D]
//   k  bf16|fp16 dense [B, Sk, Hkv, D] | packed [total_k, Hkv, D] | paged [num_pages, page_size, Hkv, D]
//   v  as k with Dv;  sink fp32 [Hq] (optional)
//   O  dtype of q, layout of q with Dv;  LSE fp32 dense [B, Hq, Sq] | varlen [Hq, total_q]
// Convention: FlashAttention (reference/attention/attention.h).
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/attention_params.h"

namespace assay::kernels::attention {

// Planted bugs (kernels/mutants/attention_mutants.cpp; none = the registered kernel).
enum class Mutation {
  none,
  kv_tile0,         // every KV tile loads the keys/values of tile 0 but masks as tile t
  no_o_rescale,     // O is not multiplied by exp(m_old - m_new) when the running max grows
  gqa_modulo,       // KV head h % Hkv instead of h / (Hq / Hkv)
  causal_top_left,  // causal / window aligned top-left: the sk - sq offset is dropped
  fp16_partials,    // split path forced; the combine rounds the partials through fp16
};

// Largest head dim (D and Dv) attention_v1 handles.
inline constexpr int kAttentionV1MaxHeadDim = 256;

// Enqueues the forward on s. p.num_splits > 1 (or m == fp16_partials): fp32 partials of the
// p.tile_n split scheme in a cudaMallocAsync workspace on s, then launch_attention_combine, then
// the workspace is freed on s. Needs p.max_seqlen_q (grid size) like every launcher.
cudaError_t attention_v1(const AttnParams& p, cudaStream_t s, Mutation m = Mutation::none);

}  // namespace assay::kernels::attention

#if !defined(__CUDACC__)
#include <fmt/format.h>

namespace assay::kernels::attention {

// can_implement of attention_v1 (and of its mutants): the shared forward checks plus v1's limits
// (head dims 1..256, grid limits). Reads shapes, dtypes and case fields only.
inline Support attention_v1_supported(const KernelCase& g) {
  if (Support s = forward_case_supported(g); !s.ok) return s;
  const CaseDims d = case_dims(g);
  if (d.D < 1 || d.Dv < 1 || d.D > kAttentionV1MaxHeadDim || d.Dv > kAttentionV1MaxHeadDim)
    return {false, fmt::format("head dims D = {}, Dv = {}: attention_v1 handles 1..{}", d.D, d.Dv, kAttentionV1MaxHeadDim)};
  if (static_cast<int64_t>(d.B) * d.Hq > 65535) return {false, fmt::format("B * Hq = {} > 65535 (grid.y)", d.B * d.Hq)};
  if (d.num_splits > 65535) return {false, fmt::format("num_splits = {} > 65535 (grid.z)", d.num_splits)};
  return {};
}

}  // namespace assay::kernels::attention
#endif
