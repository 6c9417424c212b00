// Registration of the Hopper attention forward (attention_sm90.cu) with the kernel registry:
// attention_sm90 (docs/ops/attention.md, "Kernels").
//   q, k, v bf16|fp16 (dense, varlen or packed; not paged), sink fp32 [Hq] -> O (dtype of q), LSE fp32.
// Tensors and conventions: attention_sm90.h / attention_params.h.
#include <cuda_runtime.h>

#include <fmt/format.h>

#include "kernels/attention/attention_params.h"
#include "kernels/attention/attention_sm90.h"
#include "kernels/common/kernel_support.h"
#include "kernels/registry.h"

namespace assay::kernels::attention {

// Rows of the k / v tensors of a launch (dense [B, Sk, Hkv, D] -> B * Sk; packed [total_k, Hkv, D]).
int64_t sm90_k_rows(const LaunchContext& c) {
  const DevTensor* k = c.input("k");
  if (!k || k->shape.empty()) return 0;
  int64_t rows = 1;
  for (size_t i = 0; i + 2 < k->shape.size(); ++i) rows *= static_cast<int64_t>(k->shape[i]);
  return rows;
}

Support sm90_supported(const KernelCase& g) {
  if (Support s = forward_case_supported(g); !s.ok) return s;
  if (std::string why = sm90_case_limits(case_dims(g)); !why.empty()) return {false, why};
  return {};
}

std::string run_sm90(LaunchContext& c, const std::string& name, Sm90Mutation m) {
  AttnParams p;
  if (std::string err = build_params(c, p); !err.empty()) return fmt::format("{}: {}", name, err);
  const cudaError_t e = attention_fwd_sm90(p, sm90_k_rows(c), static_cast<cudaStream_t>(c.stream), m);
  if (e == cudaErrorNotSupported)
    return fmt::format("{}: needs an sm_90 device and the driver's cuTensorMapEncodeTiled ({})", name, cudaGetErrorString(e));
  return common::cuda_error(name, e);
}

namespace {

KernelDef make_sm90() {
  KernelDef d = common::kernel_def("attention", "attention_sm90",
      "Hopper forward (sm_90a): TMA Q/K/V tiles, 2-stage mbarrier ring, producer warp group + "
      "2 consumer warp groups (wgmma m64n128k16 QK^T, PV with P from registers), softmax overlapped with the PV GEMM; "
      "128-row query tiles, 128-key tiles (64 at head dim > 128); D, Dv multiples of 8 up to 256; no paging; "
      "ignores num_splits");
  d.profile = "strict";  // fp32 scores / exp / row sums / accumulators, P rounded to the input dtype before PV
  d.relations = {"batch"};   // verify/run/relations.h (no varlen relation for attention yet)
  d.batch_invariant = true;  // one CTA per (query tile, batch, head); nothing in its arithmetic depends on B
  d.can_implement = sm90_supported;
  d.launch = [](LaunchContext& c) { return run_sm90(c, "attention_sm90", Sm90Mutation::none); };
  return d;
}

}  // namespace
ASSAY_REGISTER_KERNEL(make_sm90());
}  // namespace assay::kernels::attention
