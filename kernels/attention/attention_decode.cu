// Attention decode path (v3) and the fp16 instantiations of the tensor-core forward kernel
// (kernel template: attention_fwd.h; variant list and tensors: attention_fwd.cu).
//
// v3 decode (attention_decode_v3): for Sq = 1..16, the Sq x G (G = Hq / Hkv) query rows of one
// KV head's group are packed into the query tile (row r = i * G + (h mod G), FA3's pack_gqa), so
// each K/V tile of the KV head is read once for all G query heads; the keys are cut into splits
// (grid.z) following the oracle's split scheme, fp32 partials combined by
// launch_attention_combine. Sq * G <= 16: attn_decode_kernel (one m16 tile, 4 warps splitting
// each 64-key tile by keys); larger groups: the v2 kernel in packed mode (64-row tiles).
// Split count: the caller's, else enough CTAs for ~2-3 per SM, at most half the 64-key tiles and
// at most 16 (the combine's cost grows with the split count).
//
// Tensors: q [B, Sq, Hq, D] | [total_q, Hq, D]; k, v dense / packed / paged as in
// attention_params.h; sink fp32 [Hq]; O as q with Dv; LSE fp32 [B, Hq, Sq] | [Hq, total_q].
// Convention: FlashAttention (reference/attention/attention.h).
#define ASSAY_ATTENTION_FWD_IMPL 1
#include "kernels/attention/attention_fwd.h"

namespace assay::kernels::attention {
namespace fwd {

cudaError_t launch_fwd_f16(const AttnParams& p, bool packed, bool partial, cudaStream_t s) {
  return launch_fwd_dispatch<__half>(p, packed, partial, s);
}
cudaError_t launch_dec_f16(const AttnParams& p, bool partial, cudaStream_t s) {
  return launch_decode_dispatch<__half>(p, partial, s);
}

}  // namespace fwd

cudaError_t attention_decode_v3(const AttnParams& p0, cudaStream_t s, int num_splits) {
  const int dp = attention_fwd_padded_dim(p0.D, p0.Dv);
  if (dp == 0) return cudaErrorInvalidValue;
  AttnParams p = p0;
  const int64_t G = p.Hq / p.Hkv;
  // One m16 tile holds the packed rows: the key-split decode kernel; else the packed v2 kernel.
  const bool small = static_cast<int64_t>(p.max_seqlen_q) * G <= 16;
  if (num_splits > 0) {
    p.num_splits = num_splits;
  } else {
    static int sms = 0;
    if (sms == 0) {
      int dev = 0;
      cudaGetDevice(&dev);
      if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) sms = 132;
    }
    const int bm = small ? 16 : fwd::Cfg<128>::BM;
    const int per_sm = small ? 3 : 2;  // resident CTAs per SM (shared memory / registers)
    const int64_t base = ((static_cast<int64_t>(p.max_seqlen_q) * G + bm - 1) / bm) * p.B * p.Hkv;
    const int64_t n_tiles = (static_cast<int64_t>(p.max_seqlen_k) + fwd::BN - 1) / fwd::BN;
    int64_t ns = base > 0 ? (per_sm * sms + base - 1) / base : 1;
    // At most half the tiles, and at most 16 splits: the combine (attention_combine.cu) walks the
    // splits of a (row, head) one after another, ~1 us each (measured: 64 splits at B = 2 cost
    // ~90 us in all, the decode kernel itself a few).
    int64_t cap = n_tiles / 2 > 1 ? n_tiles / 2 : 1;
    if (cap > 16) cap = 16;
    ns = ns < 1 ? 1 : (ns > cap ? cap : ns);
    p.num_splits = static_cast<int>(ns);
    p.tile_n = fwd::BN;
  }
  if (p.num_splits <= 1) {
    p.num_splits = 1;
    return small ? fwd::launch_dec_any(p, /*partial=*/false, s)
                 : fwd::launch_any(p, /*packed=*/true, /*partial=*/false, s);
  }
  return fwd::run_split(p, /*packed=*/true, /*decode=*/small, s);
}

}  // namespace assay::kernels::attention
