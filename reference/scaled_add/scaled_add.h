// scaled_add: out = alpha * x + beta * y, elementwise. The smallest op that exercises the whole
// path fixture -> oracle -> golden -> compare; its integer fixtures make the answer exact.
//
// Tensors (any rank; the fixture uses [B, T, D]):
//   x   [B, T, D]  storage dtype from the case (bf16, fp16, fp32, ...)
//   y   [B, T, D]  same shape as x
//   out [B, T, D]  kernel-facing dtype from the case; fp64 truth here
// Bound: |alpha * x| + |beta * y| per element (the magnitude the rounding error scales with).
// Convention: torch.add(x, y, alpha=...) generalised with a scale on x; no upstream subtleties.
#pragma once
#include <vector>

#include "reference/core/tensor.h"

namespace assay::ref {

// Form 1: scalar loop, fp64.
std::vector<double> scaled_add_loop(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta);
// Form 2: Eigen array expression, fp64 (built independently of form 1).
std::vector<double> scaled_add_eigen(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta);
std::vector<double> scaled_add_bound(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta);

}  // namespace assay::ref

namespace assay::scaled_add {

// Golden assembly (scaled_add_golden.cpp): runs both forms and packages them for `assay gen`.
//   x, y: the inputs (same shape); out_dtype: the kernel-facing dtype of out.
//   -> output out (axes and shape of x; expected = the loop form, bound = scaled_add_bound),
//      agreement entry out: "loop" vs "eigen".
OracleResult oracle(const Tensor& x, const Tensor& y, double alpha, double beta, DType out_dtype);

}  // namespace assay::scaled_add
