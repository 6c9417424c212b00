// NVFP4 (TransformerEngine arithmetic) and MX (MXFP8 E4M3 / E5M2, MXFP4) quantize + dequantize.
//
// Tensors: x [M, N] bf16 codes in. Out, per direction (rowwise: blocks along N; columnwise: the
// same for x^T, stored transposed [N, M], quantized independently from x, as TE does):
//   q_<dir>       [rows, cols] codes, one per byte (fp4e2m1 / fp8e4m3 / fp8e5m2)
//   packed_<dir>  [rows, ceil(cols/2)] u8, E2M1 only, element 2k in the low nibble
//   scale_<dir>   [rows, ceil(cols/V)] fp8e4m3 (NVFP4, V = 16) or ue8m0 (MX, V = 32)
//   amax_<dir>    [1] f32 (NVFP4: the global amax used for S_enc)
//   xhat_<dir>    [rows, cols] f32 dequantized from packed/q + scale (+ amax)
//
// Variants:
//   quant_nvfp4_v1  1x16 blocks (or 16x16 tiles, block_2d), rowwise and/or columnwise.
//                   (1) amax: grid-stride reduction over 16-byte loads, max of |x| as integer bits
//                   (order independent: deterministic), one atomicMax per warp into the amax
//                   output; a 1-thread kernel applies the overrides; (2) the cast: one CTA per
//                   64x64 tile staged in shared memory through 16-byte loads; one thread per
//                   16-element block in each direction (256 threads: 64 rows x 4 blocks rowwise,
//                   64 columns x 4 blocks columnwise); 16x16 tile amaxes through shared memory;
//                   rowwise block amax on bf16 pairs (HMNMX2), E2M1 codes by integer rounding of
//                   the fp32 bits (the kernel is ALU-bound, not memory-bound, on these);
//                   (3) dequantize: one thread per element.
//   quant_mx_v1     the same tile kernel with 32-element blocks: a block is two threads (rowwise:
//                   adjacent lanes, __shfl_xor; columnwise: a shared-memory exchange); UE8M0
//                   floor (OCP spec, NaN-propagating amax) or RCEIL (TE, fmaxf amax) scales.
// quant_nvfp4_recipes_v1 (block per thread: SR, RHT, torchao) is in quant_nvfp4_recipes.cu; the
// code store and the dequantize kernel both use are in quant_block_store.cuh.
// Arithmetic: kernels/quant/quant_math.h (TE quantize_transpose_nvfp4.cuh / core_nvfp4.cuh /
// dequantize_nvfp4.cuh; TE quantize_mxfp8.cuh for RCEIL; the OCP MX reference for floor).
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/quant/quant_block_store.cuh"
#include "kernels/quant/quant_kernels.h"
#include "kernels/quant/quant_math.h"

namespace assay::kernels::quant {
namespace {

constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kPad = 72;  // smem row stride in bf16: 144 bytes, conflict-free 16-byte row reads

struct TileArgs {
  const uint16_t* x;
  int64_t M, N;
  Elem elem;
  bool rceil, block2d, row, col;
  float max_rcp;  // MX RCEIL: (float)(1.0 / max_elem)
  const float *amax_row, *amax_col;
  uint8_t *q_row, *packed_row, *scale_row, *q_col, *packed_col, *scale_col;
  bool vec_in, vec_row_out, vec_col_out;
};

__device__ __forceinline__ __nv_bfloat162 bits_bf162(uint32_t u) {
  __nv_bfloat162 r;
  memcpy(&r, &u, 4);
  return r;
}

__device__ __forceinline__ void unpack8(uint4 w, float* v) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = u2f(u[k] << 16);
    v[2 * k + 1] = u2f(u[k] & 0xFFFF0000u);
  }
}

template <int FMT>
__device__ __forceinline__ float combine(float a, float b, bool rceil) {
  if (FMT == kMx && !rceil) return qm_max_nan(a, b);  // spec floor: torch.amax, NaN propagates
  return qm_fmax(a, b);                               // TE: fmaxf, NaN dropped
}

// The amax of 16 bf16 values held as 8 words, two at a time: |x| by clearing both sign bits,
// then a bf16x2 max (HMNMX2; bf16 -> fp32 is exact, so this is the fp32 max of the same values).
// __hmax2 drops a NaN operand like fmaxf; __hmax2_nan propagates it like torch.amax (MX floor).
template <int FMT>
__device__ __forceinline__ float block_amax(uint4 w0, uint4 w1, bool rceil) {
  const uint32_t u[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  const bool nanprop = FMT == kMx && !rceil;
  __nv_bfloat162 m = bits_bf162(u[0] & 0x7FFF7FFFu);
#pragma unroll
  for (int k = 1; k < 8; ++k) {
    const __nv_bfloat162 x = bits_bf162(u[k] & 0x7FFF7FFFu);
    m = nanprop ? __hmax2_nan(m, x) : __hmax2(m, x);
  }
  const float lo = __low2float(m), hi = __high2float(m);
  // starting from 0 as the scalar loop did: max(0, |x|...) = max(|x|...) unless all are NaN
  return combine<FMT>(combine<FMT>(0.0f, lo, rceil), hi, rceil);
}

// Quantizes one 16-element block given its (block or tile) amax: codes and the scale code.
template <int FMT>
__device__ __forceinline__ uint8_t quant16(const float* v, float ab, const TileArgs& a, const Nvfp4Global& g,
                                           uint32_t (&c)[16]) {
  if (FMT == kNvfp4) {
    const uint8_t qs = nvfp4_scale_code(ab, g);
    const float r = nvfp4_encode_mult(qs, g);
#pragma unroll
    for (int i = 0; i < 16; ++i) c[i] = e2m1_code(qm_mul(v[i], r));
    return qs;
  } else {
    const uint8_t e = a.rceil ? ue8m0_rceil(qm_mul(ab, a.max_rcp)) : ue8m0_floor(ab, mx_emax(a.elem));
#pragma unroll
    for (int i = 0; i < 16; ++i) c[i] = mx_encode(v[i], e, a.elem);
    return e;
  }
}

// Quantizes one 16-element block of output row `row`, columns [col, col + 16) of `ncols`, and
// stores it: the scale code at scale[row][col / V] (NVFP4: V = 16, every block; MX: V = 32,
// written by the even block of the pair), the codes and the packed bytes (write_block).
template <int FMT>
__device__ __forceinline__ void quant_store_block(const float* v, float ab, const TileArgs& a, const Nvfp4Global& g,
                                                  uint8_t* scale, uint8_t* q, uint8_t* packed, int64_t row,
                                                  int64_t col, int64_t ncols, bool even, bool vec) {
  uint32_t c[16];
  const uint8_t sc = quant16<FMT>(v, ab, a, g, c);
  if (FMT == kNvfp4) {
    scale[row * ((ncols + 15) / 16) + col / 16] = sc;
  } else if (even) {
    scale[row * ((ncols + 31) / 32) + col / 32] = sc;
  }
  write_block(q, packed, row, col, ncols, c, vec);
}

template <int FMT>
__global__ void __launch_bounds__(kThreads) quant_tile_kernel(TileArgs a) {
  __shared__ __align__(16) uint16_t xs[kTile * kPad];
  __shared__ float part[kTile][4];      // 2D: rowwise partial amax per (row, 16-column block)
  __shared__ float tile_amax[4][4];     // 2D: amax per 16x16 tile
  __shared__ float colpart[4][kTile];   // MX columnwise: partial amax per (16-row block, column)
  const int t = threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t M = a.M, N = a.N;

  // ---- stage the 64x64 tile (zeros outside x: they change no amax and encode to code 0)
  if (a.vec_in) {
    for (int k = t; k < kTile * kTile / 8; k += kThreads) {
      const int rr = k >> 3, ch = k & 7;
      const int64_t gr = r0 + rr, gc = c0 + ch * 8;
      uint4 w = make_uint4(0, 0, 0, 0);
      if (gr < M && gc < N) w = __ldg(reinterpret_cast<const uint4*>(a.x + gr * N + gc));
      *reinterpret_cast<uint4*>(&xs[rr * kPad + ch * 8]) = w;
    }
  } else {
    for (int k = t; k < kTile * kTile; k += kThreads) {
      const int rr = k >> 6, cc = k & 63;
      const int64_t gr = r0 + rr, gc = c0 + cc;
      xs[rr * kPad + cc] = (gr < M && gc < N) ? a.x[gr * N + gc] : static_cast<uint16_t>(0);
    }
  }
  __syncthreads();

  Nvfp4Global g_row{}, g_col{};
  if (FMT == kNvfp4) {
    if (a.row) g_row = nvfp4_global(*a.amax_row);
    if (a.col) g_col = nvfp4_global(*a.amax_col);
  }
  const bool two_d = FMT == kNvfp4 && a.block2d;

  // ---- rowwise: thread = (row rr, 16-column block seg)
  if (a.row || two_d) {
    const int rr = t >> 2, seg = t & 3;
    const int64_t gr = r0 + rr, gc = c0 + seg * 16;
    const uint4 w0 = *reinterpret_cast<const uint4*>(&xs[rr * kPad + seg * 16]);
    const uint4 w1 = *reinterpret_cast<const uint4*>(&xs[rr * kPad + seg * 16 + 8]);
    float v[16];
    unpack8(w0, v);
    unpack8(w1, v + 8);
    const float pa = block_amax<FMT>(w0, w1, a.rceil);
    if (two_d) {
      part[rr][seg] = pa;
      __syncthreads();
      if (t < 16) {
        const int i = t >> 2, j = t & 3;
        float m = 0.0f;
        for (int k = 0; k < 16; ++k) m = qm_fmax(m, part[i * 16 + k][j]);
        tile_amax[i][j] = m;
      }
      __syncthreads();
    }
    if (a.row) {
      float ab = pa;
      if (FMT == kMx) ab = combine<FMT>(pa, __shfl_xor_sync(0xffffffffu, pa, 1), a.rceil);
      if (two_d) ab = tile_amax[rr >> 4][seg];
      if (gr < M && gc < N)
        quant_store_block<FMT>(v, ab, a, g_row, a.scale_row, a.q_row, a.packed_row, gr, gc, N, (seg & 1) == 0,
                               a.vec_row_out);
    }
  }

  // ---- columnwise: thread = (column cc, 16-row block seg); output row = column of x
  if (a.col) {
    const int cc = t & 63, seg = t >> 6;
    const int64_t gcx = c0 + cc, gm = r0 + seg * 16;
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = bf16_to_f32(xs[(seg * 16 + i) * kPad + cc]);
    float pa = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) pa = combine<FMT>(pa, qm_abs(v[i]), a.rceil);
    float ab = pa;
    if (FMT == kMx) {
      colpart[seg][cc] = pa;
      __syncthreads();
      ab = combine<FMT>(pa, colpart[seg ^ 1][cc], a.rceil);
    }
    if (two_d) ab = tile_amax[seg][cc >> 4];
    if (gcx < N && gm < M)
      quant_store_block<FMT>(v, ab, a, g_col, a.scale_col, a.q_col, a.packed_col, gcx, gm, M, (seg & 1) == 0,
                             a.vec_col_out);
  }
}

// ---- amax of |x| over the whole tensor (fmaxf semantics: NaN dropped), as fp32 bits.
__global__ void amax_reduce_kernel(const uint16_t* x, int64_t n, bool vec, unsigned* acc) {
  unsigned m = 0;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  auto take = [&](uint32_t b) {
    b &= 0x7FFFu;
    if (b <= 0x7F80u) m = max(m, b);  // NaN (exponent all ones, mantissa != 0) dropped
  };
  int64_t tail = 0;
  if (vec) {
    const int64_t nv = n / 8;
    for (int64_t i = tid; i < nv; i += stride) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(x) + i);
      take(w.x & 0xFFFFu), take(w.x >> 16), take(w.y & 0xFFFFu), take(w.y >> 16);
      take(w.z & 0xFFFFu), take(w.z >> 16), take(w.w & 0xFFFFu), take(w.w >> 16);
    }
    tail = nv * 8;
  }
  for (int64_t i = tail + tid; i < n; i += stride) take(x[i]);
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(acc, m << 16);
}

__global__ void amax_finalize_kernel(const float* acc, float* amax_row, float* amax_col, bool row_given, float row_v,
                                     bool col_given, float col_v) {
  const float A = acc ? *acc : 0.0f;
  if (amax_row) *amax_row = row_given ? row_v : A;
  if (amax_col) *amax_col = col_given ? col_v : A;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <int FMT>
cudaError_t launch_tiles(TileArgs& ta, cudaStream_t s) {
  ta.vec_in = ta.N % 8 == 0 && aligned16(ta.x);
  ta.vec_row_out = ta.N % 16 == 0 && (!ta.q_row || aligned16(ta.q_row)) && (!ta.packed_row || aligned16(ta.packed_row));
  ta.vec_col_out = ta.M % 16 == 0 && (!ta.q_col || aligned16(ta.q_col)) && (!ta.packed_col || aligned16(ta.packed_col));
  const int64_t gy = (ta.M + kTile - 1) / kTile, gx = (ta.N + kTile - 1) / kTile;
  if (gy > 65535 || gx > 2147483647) return cudaErrorInvalidValue;
  quant_tile_kernel<FMT><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, 0, s>>>(ta);
  return cudaGetLastError();
}

}  // namespace

cudaError_t quant_nvfp4_v1(const Nvfp4Args& a, cudaStream_t s) {
  const bool row = a.scale_row != nullptr, col = a.scale_col != nullptr;
  if (a.M < 1 || a.N < 1 || !a.x || (!row && !col) || (row && !a.amax_row) || (col && !a.amax_col))
    return cudaErrorInvalidValue;
  if (a.compute_amax) {
    const bool need = (row && !a.amax_row_given) || (col && !a.amax_col_given);
    float* acc = nullptr;
    if (need) {
      acc = (row && !a.amax_row_given) ? a.amax_row : a.amax_col;
      if (cudaError_t e = cudaMemsetAsync(acc, 0, sizeof(float), s); e != cudaSuccess) return e;
      const int64_t n = a.M * a.N;
      const bool vec = aligned16(a.x);
      int dev = 0, sms = 132;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      const int th = 512;
      int64_t blocks = (n / 8 + th - 1) / th;
      blocks = blocks < 1 ? 1 : (blocks > sms * 4 ? sms * 4 : blocks);
      amax_reduce_kernel<<<static_cast<unsigned>(blocks), th, 0, s>>>(a.x, n, vec, reinterpret_cast<unsigned*>(acc));
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    amax_finalize_kernel<<<1, 1, 0, s>>>(acc, row ? a.amax_row : nullptr, col ? a.amax_col : nullptr, a.amax_row_given,
                                         a.amax_row_value, a.amax_col_given, a.amax_col_value);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  TileArgs ta{};
  ta.x = a.x;
  ta.M = a.M;
  ta.N = a.N;
  ta.elem = Elem::e2m1;
  ta.block2d = a.block_2d;
  ta.row = row;
  ta.col = col;
  ta.amax_row = a.amax_row;
  ta.amax_col = a.amax_col;
  ta.q_row = a.q_row, ta.packed_row = a.packed_row, ta.scale_row = a.scale_row;
  ta.q_col = a.q_col, ta.packed_col = a.packed_col, ta.scale_col = a.scale_col;
  if (cudaError_t e = launch_tiles<kNvfp4>(ta, s); e != cudaSuccess) return e;
  if (row && a.xhat_row && (a.packed_row || a.q_row))
    if (cudaError_t e = launch_dequant<kNvfp4>(a.q_row, a.packed_row, a.scale_row, a.amax_row, a.M, a.N, Elem::e2m1,
                                               a.xhat_row, s);
        e != cudaSuccess)
      return e;
  if (col && a.xhat_col && (a.packed_col || a.q_col))
    if (cudaError_t e = launch_dequant<kNvfp4>(a.q_col, a.packed_col, a.scale_col, a.amax_col, a.N, a.M, Elem::e2m1,
                                               a.xhat_col, s);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}

cudaError_t quant_mx_v1(const MxArgs& a, cudaStream_t s) {
  const bool row = a.scale_row != nullptr, col = a.scale_col != nullptr;
  if (a.M < 1 || a.N < 1 || !a.x || (!row && !col) || a.elem < 0 || a.elem > 2) return cudaErrorInvalidValue;
  const Elem el = static_cast<Elem>(a.elem);
  const double maxv = el == Elem::e4m3 ? 448.0 : (el == Elem::e5m2 ? 57344.0 : 6.0);
  TileArgs ta{};
  ta.x = a.x;
  ta.M = a.M;
  ta.N = a.N;
  ta.elem = el;
  ta.rceil = a.rceil;
  ta.max_rcp = static_cast<float>(1.0 / maxv);
  ta.row = row;
  ta.col = col;
  const bool fp4 = el == Elem::e2m1;
  ta.q_row = a.q_row, ta.packed_row = fp4 ? a.packed_row : nullptr, ta.scale_row = a.scale_row;
  ta.q_col = a.q_col, ta.packed_col = fp4 ? a.packed_col : nullptr, ta.scale_col = a.scale_col;
  if (cudaError_t e = launch_tiles<kMx>(ta, s); e != cudaSuccess) return e;
  if (row && a.xhat_row && (ta.packed_row || a.q_row))
    if (cudaError_t e = launch_dequant<kMx>(a.q_row, ta.packed_row, a.scale_row, nullptr, a.M, a.N, el, a.xhat_row, s);
        e != cudaSuccess)
      return e;
  if (col && a.xhat_col && (ta.packed_col || a.q_col))
    if (cudaError_t e = launch_dequant<kMx>(a.q_col, ta.packed_col, a.scale_col, nullptr, a.N, a.M, el, a.xhat_col, s);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}

}  // namespace assay::kernels::quant
