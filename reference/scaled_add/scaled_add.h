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

namespace assay::ref {

// Form 1: scalar loop, fp64.
std::vector<double> scaled_add_loop(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta);
// Form 2: Eigen array expression, fp64 (built independently of form 1).
std::vector<double> scaled_add_eigen(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta);
std::vector<double> scaled_add_bound(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta);

}  // namespace assay::ref
