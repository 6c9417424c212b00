// Internal to kernels/quant (quant_block.cu, quant_nvfp4_recipes.cu): storing the codes of a
// 16-element block and the dequantize kernel of NVFP4 / MX outputs.
//
// Tensors (per direction, as quant_block.cu): q [rows, cols] codes one per byte, packed
// [rows, ceil(cols/2)] u8 (E2M1, element 2k in the low nibble), scale [rows, ceil(cols/V)]
// (e4m3 for NVFP4, V = 16; ue8m0 for MX, V = 32), amax [1] f32 (NVFP4), out (xhat) [rows, cols] f32.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/quant/quant_math.h"

namespace assay::kernels::quant {
namespace {

enum Fmt : int { kNvfp4 = 0, kMx = 1 };

// Writes 16 codes (0..15 each) of one block: q[row][col0 .. col0+15] and the 8 packed bytes
// (cols clipped; padding codes are 0, as the packed rows are padded with code 0).
__device__ __forceinline__ void write_block(uint8_t* q, uint8_t* packed, int64_t row, int64_t col0, int64_t ncols,
                                            uint32_t (&c)[16], bool vec) {
  if (col0 + 16 > ncols) {
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (col0 + i >= ncols) c[i] = 0;
  }
  if (q) {
    uint8_t* p = q + row * ncols + col0;
    if (vec) {
      uint4 w;
      w.x = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
      w.y = c[4] | (c[5] << 8) | (c[6] << 16) | (c[7] << 24);
      w.z = c[8] | (c[9] << 8) | (c[10] << 16) | (c[11] << 24);
      w.w = c[12] | (c[13] << 8) | (c[14] << 16) | (c[15] << 24);
      *reinterpret_cast<uint4*>(p) = w;
    } else {
      for (int i = 0; i < 16; ++i)
        if (col0 + i < ncols) p[i] = static_cast<uint8_t>(c[i]);
    }
  }
  if (packed) {
    const int64_t pc = (ncols + 1) / 2;
    // element 2k in the low nibble of byte k
    uint32_t w0 = 0, w1 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) w0 |= c[i] << (4 * i);
#pragma unroll
    for (int i = 0; i < 8; ++i) w1 |= c[8 + i] << (4 * i);
    uint8_t* p = packed + row * pc + col0 / 2;
    if (vec) {
      *reinterpret_cast<uint2*>(p) = make_uint2(w0, w1);
    } else {
      for (int j = 0; j < 8; ++j)
        if (col0 / 2 + j < pc) p[j] = static_cast<uint8_t>(((j < 4 ? w0 : w1) >> (8 * (j & 3))) & 0xFFu);
    }
  }
}

// The code of element (r, c) of a [rows, cols] output: from the packed bytes (E2M1, element 2k in
// the low nibble of byte k) when written, else from q.
__device__ __forceinline__ uint8_t stored_code(const uint8_t* q, const uint8_t* packed, int64_t r, int64_t c,
                                               int64_t cols) {
  if (!packed) return q[r * cols + c];
  const uint8_t b = packed[r * ((cols + 1) / 2) + c / 2];
  return (c & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xF);
}

// ---- dequantize: one thread per element; codes from packed (E2M1) or q.
template <int FMT>
__global__ void dequant_kernel(const uint8_t* q, const uint8_t* packed, const uint8_t* scale, const float* amax,
                               int64_t rows, int64_t cols, Elem elem, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const uint8_t code = stored_code(q, packed, r, c, cols);
  if (FMT == kNvfp4) {
    out[i] = nvfp4_dequant(code, scale[r * ((cols + 15) / 16) + c / 16], *amax);
  } else {
    out[i] = mx_dequant(code, scale[r * ((cols + 31) / 32) + c / 32], elem);
  }
}

template <int FMT>
cudaError_t launch_dequant(const uint8_t* q, const uint8_t* packed, const uint8_t* scale, const float* amax,
                           int64_t rows, int64_t cols, Elem elem, float* out, cudaStream_t s) {
  const int64_t n = rows * cols;
  const int th = 256;
  dequant_kernel<FMT><<<static_cast<unsigned>((n + th - 1) / th), th, 0, s>>>(q, packed, scale, amax, rows, cols, elem, out);
  return cudaGetLastError();
}

}  // namespace
}  // namespace assay::kernels::quant
