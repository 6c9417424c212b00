// Registration of the SSD forward kernel (ssd_fwd.cu) with the kernel registry: ssd_chunked_mma.
// Tensors and stages: ssd_fwd.h.
//   x, B, C, z bf16|fp16; dt, A, D, dt_bias, initial_states fp32; seq_idx, cu_seqlens int32
//   -> out (x's dtype or fp32), final_states / varlen_states fp32, chunk_states (x's dtype).
#include "kernels/common/kernel_support.h"
#include "kernels/registry.h"
#include "kernels/ssd/ssd_launch.h"

namespace assay::kernels::ssd {
namespace {

KernelDef make_chunked_mma() {
  KernelDef d = common::kernel_def("ssd", "ssd_chunked_mma",
      "Mamba-2 SSD chunked forward in mamba_ssm's four stages (chunk_state, state_passing, chunk_scan, "
      "chunk_state_varlen): mma.sync m16n8k16 bf16/fp16 with fp32 accumulators, 64-token tiles, chunk 16..256");
  d.relations = {"batch", "continuation", "varlen"};  // verify/run/relations.h
  d.batch_invariant = true;  // one CTA per (chunk, b, h): nothing depends on B but the grid
  d.can_implement = ssd_supported;
  d.intermediates = {"chunk_states"};
  d.launch = [](LaunchContext& c) { return ssd_launch(c, "ssd_chunked_mma"); };
  return d;
}

}  // namespace
}  // namespace assay::kernels::ssd

ASSAY_REGISTER_KERNEL(assay::kernels::ssd::make_chunked_mma());
