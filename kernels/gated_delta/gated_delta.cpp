// Registration of the gated delta rule kernels (gated_delta_recurrent.cu, gated_delta_chunked.cu) with the
// kernel registry.
// Tensors (gated_delta.h): q, k [B, T, H, K], v [B, T, HV, V], beta [B, T, HV] bf16 | fp16 | fp32;
// g [B, T, HV], A_log, dt_bias [HV], initial_state [Nseq, HV, K, V] (or [.., V, K]) fp32;
// cu_seqlens [Nseq1] int64 -> o [B, T, HV, V] (the golden's dtype), final_state (fp32), and the
// chunk_states intermediate [NC, HV, K, V] (k's dtype).
#include <cuda_runtime.h>

#include "kernels/common/kernel_support.h"
#include "kernels/gated_delta/gated_delta.h"
#include "kernels/registry.h"

namespace assay::kernels::gated_delta {
namespace {

KernelDef make_recurrent() {
  KernelDef d = common::kernel_def("gated_delta", "gated_delta_recurrent",
      "fused recurrent (fla fused_recurrent_gated_delta_rule): fp32 K x V state in registers (16 value columns per "
      "CTA, K rows over a warp's lanes), q/k l2norm and gates in fp32, prefill over 16-token shared-memory tiles "
      "(producer warp), decode one launch per step; o, final_state and chunk_states rounded once at the store");
  d.profile = "strict";
  d.intermediates = {"chunk_states"};
  d.relations = {"batch", "continuation", "varlen"};  // verify/run/relations.h
  d.batch_invariant = true;  // one CTA per (sequence, value head): nothing depends on B but the grid
  d.can_implement = recurrent_supported;
  d.launch = [](LaunchContext& c) -> std::string {
    Params p;
    if (std::string err = build_params(c, p); !err.empty()) return "gated_delta_recurrent: " + err;
    return common::cuda_error("gated_delta_recurrent", gated_delta_recurrent(p, static_cast<cudaStream_t>(c.stream)));
  };
  return d;
}

KernelDef make_chunked() {
  KernelDef d = common::kernel_def("gated_delta", "gated_delta_chunked",
      "chunked WY / UT forward (fla chunk_gated_delta_rule) in three phases on tensor cores (mma.sync m16n8k16, bf16 "
      "operands, fp32 accumulate): chunk-parallel k k^T, (I + A)^-1 by fp32 forward substitution, u = T beta v, "
      "w = T beta e^G k; a sequential pass per (sequence, hv, 32 value columns) with the fp32 state in registers "
      "(v_new = u - w S, the state update); chunk-parallel o");
  d.profile = "bf16-states";
  d.intermediates = {"chunk_states"};
  d.relations = {"batch", "continuation", "varlen"};  // verify/run/relations.h
  d.batch_invariant = true;  // one CTA per (sequence, value head): nothing depends on B but the grid
  d.can_implement = chunked_supported;
  d.launch = [](LaunchContext& c) -> std::string {
    Params p;
    if (std::string err = build_params(c, p); !err.empty()) return "gated_delta_chunked: " + err;
    return common::cuda_error("gated_delta_chunked", gated_delta_chunked(p, static_cast<cudaStream_t>(c.stream)));
  };
  return d;
}

}  // namespace
ASSAY_REGISTER_KERNEL(make_recurrent());
ASSAY_REGISTER_KERNEL(make_chunked());
}  // namespace assay::kernels::gated_delta
