// Registration of the scaled_add kernels (kernels/scaled_add/scaled_add.cu) with the kernel registry.
// Tensors: x, y [B, T, D] bf16 codes in; out [B, T, D] bf16 codes. Case scalars alpha, beta.
#include <cuda_runtime.h>

#include "kernels/common/kernel_support.h"
#include "kernels/registry.h"
#include "kernels/scaled_add/scaled_add.h"

namespace assay::kernels {
namespace {

KernelDef make_scaled_add_v1() {
  KernelDef d = common::kernel_def("scaled_add", "scaled_add_v1",
      "one thread per element, fp32 fmaf(alpha, x, beta*y), RNE to bf16");
  d.can_implement = [](const KernelCase& g) { return require_dtypes(g, {"x", "y", "out"}, {DType::bf16}); };
  d.launch = [](LaunchContext& c) -> std::string {
    const auto *x = c.input("x"), *y = c.input("y"), *out = c.output("out");
    if (!x || !y || !out) return "scaled_add_v1: the case lacks x, y or out";
    const auto e = scaled_add_v1(x->data, y->data, out->data, static_cast<float>(c.params.get_double("alpha")),
                                 static_cast<float>(c.params.get_double("beta")), out->numel(),
                                 static_cast<cudaStream_t>(c.stream));
    return common::cuda_error("scaled_add_v1", e);
  };
  return d;
}

}  // namespace
ASSAY_REGISTER_KERNEL(make_scaled_add_v1());
}  // namespace assay::kernels
