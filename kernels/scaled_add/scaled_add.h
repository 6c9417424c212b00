// scaled_add kernels. x, y, out: device pointers to n bf16 codes.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace assay::kernels {

cudaError_t scaled_add_v1(const void* x, const void* y, void* out, float alpha, float beta, int64_t n, cudaStream_t s);

}  // namespace assay::kernels
