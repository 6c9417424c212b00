// Registration of the Mamba-3 forward kernels (mamba3_fwd.cu) with the kernel registry.
// Tensors (mamba3.h): Q, K [B, T, (R,) G, N], V, Z [B, T, H, P], ADT, DT, Trap [B, H, T], Q_bias,
// K_bias [H, (R,) N], Angles [B, T, H, A], D [H], MIMO_V / MIMO_Z / MIMO_Out [H, R, P],
// outproj_norm_weight [H, P], the four input states, cu_seqlens [NS + 1] int32 -> out, final_angle,
// final_ssm, final_k, final_v and the chunk_states intermediate [C, H, P, N].
#include <cuda_runtime.h>

#include "kernels/common/kernel_support.h"
#include "kernels/mamba3/mamba3.h"
#include "kernels/registry.h"

namespace assay::kernels::mamba3 {
namespace {

KernelDef make(bool mimo) {
  const char* name = mimo ? "mamba3_mimo_chunked" : "mamba3_siso_chunked";
  KernelDef d = common::kernel_def(
      "mamba3", name,
      mimo ? "Mamba-3 MIMO chunked forward, fp32 SIMT (no tensor cores): one CTA per (sequence, head), fp32 P x N state "
             "in shared memory, rotated q / k staged through the flattened [chunk*rank, N] view (qk_dot_shared), "
             "decay-masked scores over every rank pair, fp32 angle cumsum; outputs rounded once at the store"
           : "Mamba-3 SISO chunked forward, fp32 SIMT (no tensor cores): one CTA per (sequence, head), fp32 P x N state "
             "in shared memory, decay-masked intra-chunk scores, folded trapezoid state passing, fp32 angle cumsum; "
             "outputs and the bf16 chunk_states rounded once at the store");
  d.profile = "strict";
  d.intermediates = {"chunk_states"};
  d.relations = {"batch", "continuation", "varlen"};  // verify/run/relations.h
  d.batch_invariant = true;  // one CTA per (sequence, head): nothing depends on B but the grid
  d.can_implement = [mimo](const KernelCase& g) { return fwd_supported(g, mimo); };
  d.launch = [n = std::string(name)](LaunchContext& c) -> std::string {
    Params p;
    if (std::string err = build_params(c, p); !err.empty()) return n + ": " + err;
    return common::cuda_error(n, mamba3_fwd(p, static_cast<cudaStream_t>(c.stream)));
  };
  return d;
}

}  // namespace
ASSAY_REGISTER_KERNEL(make(false));
ASSAY_REGISTER_KERNEL(make(true));
}  // namespace assay::kernels::mamba3
