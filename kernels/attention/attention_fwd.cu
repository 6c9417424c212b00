// Attention forward on tensor cores (sm_90, mma.sync m16n8k16, fp32 accumulation): FA2-style
// tiled online softmax. The kernel template lives in attention_fwd.h (implementation section);
// this file instantiates the bf16 kernels and the v2 launchers, attention_decode.cu the fp16
// kernels and the v3 decode launcher.
//
// Tensors (golden names; storage codes; docs/DESIGN.md "Axis vocabulary"):
//   q        bf16|fp16  dense [B, Sq, Hq, D] | varlen [total_q, Hq, D] (cu_seqlens_q)
//   k        bf16|fp16  dense [B, Sk, Hkv, D] | packed [total_k, Hkv, D] (cu_seqlens_k)
//                       | paged [num_pages, page_size, Hkv, D] (block_table [B, pages_per_seq])
//   v        as k with Dv            sink fp32 [Hq] (optional)   seqused_k int32 [B] (optional)
//   O        dtype of q, as q with Dv
//   LSE      fp32 dense [B, Hq, Sq] | varlen [Hq, total_q]
//
// Numbered variants of the attention family (kernels/attention/):
//   v1           attention_v1.cu (readable scalar baseline, one thread block per query row).
//   v2           attention_fwd_v2: 8 warps x 16 query rows (4 warps for padded head dim 256) per
//                CTA, KV tiles of 64 keys double-buffered in shared memory with 16-byte cp.async
//                (rows gathered one by one, so any page size works), ldmatrix (.trans for V),
//                S = Q K^T and O += P V with mma.sync (P reused from registers as the A operand),
//                online softmax in exp2 with running max / sum and O rescale, tile skipping
//                outside the CTA's visible key range, masking only on boundary tiles.
//   v2_split     attention_fwd_v2_split: the same kernel over the oracle's split scheme
//                (grid.z = num_splits, tile_n of the case), fp32 partials, LSE-weighted combine
//                (attention_combine.cu). The sink is folded into split 0.
//   v3_decode    attention_decode_v3 (attention_decode.cu): the Sq x (Hq / Hkv) query rows of a
//                GQA group packed into the query tile (K/V read once per group), split-KV over
//                the keys (split count from the SM count unless the caller gives one). When
//                Sq x G <= 16: a dedicated kernel (one m16 tile, the 4 warps split each 64-key
//                tile by keys, their softmax states merged in shared memory); otherwise the v2
//                kernel with packed rows (128-row tiles).
// Head dims: D, Dv <= 256, padded with zeros up to 32 / 64 / 96 / 128 / 256 (Dv != D allowed).
//
// Convention: FlashAttention @ 0251105a2fb1 (reference/attention/attention.h): bottom-right
// causal, inclusive windows, GQA h / (Hq / Hkv), softcap on the scaled scores, sink in the
// denominator only, fully masked rows O = 0 with LSE = -inf (the oracle's value; FA2/FA3 store
// +inf there in the unsplit path), natural-log LSE.
#define ASSAY_ATTENTION_FWD_IMPL 1
#include "kernels/attention/attention_fwd.h"

#if __has_include("kernels/attention/attention_combine.h")
#include "kernels/attention/attention_combine.h"
#else
namespace assay::kernels::attention {
cudaError_t launch_attention_combine(const AttnParams& p, cudaStream_t s, bool mutant_fp16_partials = false);
}
#endif

namespace assay::kernels::attention {

int attention_fwd_padded_dim(int D, int Dv) {
  const int d = D > Dv ? D : Dv;
  if (D < 1 || Dv < 1 || d > 256) return 0;
  if (d <= 32) return 32;
  if (d <= 64) return 64;
  if (d <= 96) return 96;
  if (d <= 128) return 128;
  return 256;
}

namespace fwd {

cudaError_t launch_fwd_bf16(const AttnParams& p, bool packed, bool partial, cudaStream_t s) {
  return launch_fwd_dispatch<__nv_bfloat16>(p, packed, partial, s);
}

cudaError_t launch_dec_bf16(const AttnParams& p, bool partial, cudaStream_t s) {
  return launch_decode_dispatch<__nv_bfloat16>(p, partial, s);
}

// Keep freed workspace in the stream-ordered pool (the default release threshold 0 would hand
// it back to the driver at every synchronisation and make each call map fresh memory).
static void keep_pool_memory() {
  static const bool done = [] {
    int dev = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
      uint64_t thr = 1ull << 30;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr);
    }
    cudaGetLastError();
    return true;
  }();
  (void)done;
}

cudaError_t run_split(AttnParams p, bool packed, bool decode, cudaStream_t s) {
  if (p.total_q <= 0 || p.max_seqlen_q <= 0) return cudaSuccess;
  if (p.num_splits < 1 || p.tile_n < 1) return cudaErrorInvalidValue;
  keep_pool_memory();
  const size_t n_o = static_cast<size_t>(p.num_splits) * p.total_q * p.Hq * p.Dv;
  const size_t n_l = static_cast<size_t>(p.num_splits) * p.total_q * p.Hq;
  void* ws = nullptr;
  cudaError_t e = cudaMallocAsync(&ws, (n_o + n_l) * sizeof(float), s);
  if (e != cudaSuccess) return e;
  p.o_partial = static_cast<float*>(ws);
  p.lse_partial = p.o_partial + n_o;
  e = decode ? launch_dec_any(p, /*partial=*/true, s) : launch_any(p, packed, /*partial=*/true, s);
  if (e == cudaSuccess && p.corrupt_split >= 1 && p.corrupt_split < p.num_splits) {  // test-only mutant
    const size_t so = n_o / p.num_splits, sl = n_l / p.num_splits, k = static_cast<size_t>(p.corrupt_split);
    e = cudaMemcpyAsync(p.o_partial + k * so, p.o_partial, so * sizeof(float), cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(p.lse_partial + k * sl, p.lse_partial, sl * sizeof(float), cudaMemcpyDeviceToDevice, s);
  }
  if (e == cudaSuccess && p.o_partial_export)
    e = cudaMemcpyAsync(p.o_partial_export, p.o_partial, n_o * sizeof(float), cudaMemcpyDeviceToDevice, s);
  if (e == cudaSuccess && p.lse_partial_export) e = launch_export_lse_partials(p, p.lse_partial_export, s);
  if (e == cudaSuccess) e = launch_attention_combine(p, s);
  const cudaError_t ef = cudaFreeAsync(ws, s);
  return e != cudaSuccess ? e : ef;
}

}  // namespace fwd

cudaError_t attention_fwd_v2(const AttnParams& p, cudaStream_t s) {
  if (attention_fwd_padded_dim(p.D, p.Dv) == 0) return cudaErrorInvalidValue;
  return fwd::launch_any(p, /*packed=*/false, /*partial=*/false, s);
}

cudaError_t attention_fwd_v2_split(const AttnParams& p, cudaStream_t s) {
  if (attention_fwd_padded_dim(p.D, p.Dv) == 0) return cudaErrorInvalidValue;
  return fwd::run_split(p, /*packed=*/false, /*decode=*/false, s);
}

}  // namespace assay::kernels::attention
