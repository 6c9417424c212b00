// BF16 copies of fp32 masters (op optim, optimizer = bf16_copy): RNE, TE store_param_remainders
// split / merge, torchao stochastic rounding.
//
// Tensors: master [N] fp32, rbits [N] int32 (16-bit draws) -> rne, te [N] bf16 codes, remainder
// [N] int32, recovered [N] fp32, sr [N] bf16 codes (any output may be null).
// Variants:
//   v1 (this file): grid-stride, one element per thread per iteration, bit manipulation only.
// Upstream conventions (reference/optim/bf16_copy.cpp, optim_common.cpp; spec B2): RNE with
//   NaN -> 0x7FC0|sign; TE: hi = top 16 bits, rem = low 16 bits, rem < 0 -> hi += 1 (ties away);
//   torchao _fp32_to_bf16_sr: round away from zero iff r < low 16 bits; NaN keeps a quiet bit.
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::f2bf;

// ---------------------------------------------------------------------------------------------
// bf16 copies of fp32 masters (RNE; TE remainder split / merge; torchao stochastic rounding)
// ---------------------------------------------------------------------------------------------
namespace {
__global__ void bf16_copies_kernel(const float* master, const int* rbits, uint16_t* rne, uint16_t* te, int* rem_out,
                                   float* recovered, uint16_t* sr, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = master[i];
    const uint32_t b = __float_as_uint(x);
    if (rne) rne[i] = f2bf(x);
    // TE split: hi = top 16 bits, rem = low 16 bits as int16; rem < 0 -> hi += 1 (ties away).
    uint16_t hi = static_cast<uint16_t>(b >> 16);
    const int16_t rem = static_cast<int16_t>(static_cast<uint16_t>(b & 0xFFFFu));
    if (rem < 0) hi = static_cast<uint16_t>(hi + 1u);
    if (te) te[i] = hi;
    if (rem_out) rem_out[i] = rem;
    if (recovered) {  // merge: rem < 0 -> hi -= 1; master = (hi << 16) | rem
      const uint16_t h2 = rem < 0 ? static_cast<uint16_t>(hi - 1u) : hi;
      recovered[i] = __uint_as_float((static_cast<uint32_t>(h2) << 16) | static_cast<uint16_t>(rem));
    }
    if (sr) {  // torchao _fp32_to_bf16_sr with an explicit 16-bit draw r
      uint16_t out;
      if (!isfinite(x)) {
        out = isnan(x) ? static_cast<uint16_t>((b >> 16) | 0x0040u) : static_cast<uint16_t>(b >> 16);
      } else {
        const uint32_t r = static_cast<uint32_t>(rbits[i]) & 0xFFFFu;
        const uint32_t tz = b & 0xFFFF0000u;
        out = static_cast<uint16_t>(((r < (b & 0xFFFFu)) ? tz + 0x10000u : tz) >> 16);
      }
      sr[i] = out;
    }
  }
}
}  // namespace

cudaError_t bf16_copies(const float* master, const int* rbits, uint16_t* rne, uint16_t* te, int* remainder,
                        float* recovered, uint16_t* sr, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (sr && !rbits) return cudaErrorInvalidValue;
  const void* k = reinterpret_cast<const void*>(&bf16_copies_kernel);
  bf16_copies_kernel<<<grid_for(k, kThreads, n), kThreads, 0, stream>>>(master, rbits, rne, te, remainder, recovered,
                                                                          sr, n);
  return cudaGetLastError();
}

}  // namespace assay::kernels::optim
