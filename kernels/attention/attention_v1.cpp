// Registration of attention_v1 (kernels/attention/attention_v1.cu): the readable scalar baseline.
// Tensors: q, k, v bf16|fp16 (dense, varlen, packed or paged), sink fp32 [Hq] optional, int32
// cu_seqlens_q / cu_seqlens_k / seqused_k / block_table -> O (dtype of q), LSE fp32
// (attention_params.h). The mutants of kernels/mutants/attention_mutants.cpp are not registered here.
#include <cuda_runtime.h>

#include "kernels/common/kernel_support.h"
#include "kernels/attention/attention_params.h"
#include "kernels/attention/attention_v1.h"
#include "kernels/registry.h"

namespace assay::kernels::attention {
namespace {

KernelDef make_attention_v1() {
  KernelDef d = common::kernel_def("attention", "attention_v1",
      "readable baseline: CTA per (16 query rows, head, split), KV tiles of tile_n keys in shared memory, scalar fp32, "
      "online softmax; split-KV with fp32 partials + LSE-weighted combine");
  d.relations = {"batch"};  // verify/run/relations.h (no varlen relation for attention yet)
  d.batch_invariant = true;  // one block per (b, h, query row tile): nothing depends on B but the grid
  d.can_implement = [](const KernelCase& g) { return attention_v1_supported(g); };
  d.launch = [](LaunchContext& c) -> std::string {
    AttnParams p;
    if (std::string err = build_params(c, p); !err.empty()) return "attention_v1: " + err;
    const cudaError_t e = attention_v1(p, static_cast<cudaStream_t>(c.stream));
    return common::cuda_error("attention_v1", e);
  };
  return d;
}

}  // namespace
ASSAY_REGISTER_KERNEL(make_attention_v1());
}  // namespace assay::kernels::attention
