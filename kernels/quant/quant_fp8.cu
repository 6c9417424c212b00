// FP8 scaling quantize + dequantize, and the 128x4 scale-factor swizzle.
//
// Tensors: x [M, N] bf16 codes in; q [M, N] fp8e4m3 / fp8e5m2 codes; scale_inv, scale, amax
// [SR, SC] f32, one per group; xhat [M, N] f32 = fl(decode(q) * scale_inv). Groups: per tensor
// [1, 1]; per channel (row) [M, 1]; DeepSeek 1x128 [M, ceil(N/128)]; 128x128
// [ceil(M/128), ceil(N/128)] (edge groups ragged; DeepGEMM's zero padding leaves the amax alone).
// Swizzle: sf [rows, cols] u8 -> sf_swizzled [roundup(rows,128) * roundup(cols,4)] u8, padding 0.
//
// Variants:
//   quant_fp8_v1      per tensor: grid-stride amax (integer max of |x| bits: deterministic; NaN
//                     dropped for TE, propagated for DeepGEMM's torch.amax) with one atomicMax per
//                     warp, a 1-thread kernel for the scale, a grid-stride cast with 16-byte loads;
//                     grouped granularities: one CTA (128 threads) per group, amax by a block
//                     reduction, then the cast of the same group (re-read from L2);
//                     dequantize one thread per element.
//   quant_fp8_v2      DeepSeek 1x128 and 128x128 (N % 4 == 0) read x once, 8 bytes per lane:
//                     1x128 = a CTA per row, a warp per group (4 groups per warp in flight), the
//                     warp's max is the group amax and every lane computes the same scale;
//                     128x128 = one 256-thread CTA per group holding its 16 rows per warp in
//                     registers (block max through shared memory). Same arithmetic as v1 (integer max of |x| bits, group_scale,
//                     fp8_encode), so the same bits. Other granularities: v1's kernels.
//   quant_swizzle_v1  one thread per swizzled byte (inverse of the offset map).
// Conventions: TE recipe_common.cuh compute_scale_from_amax (current scaling, pow2 = mantissa
// cleared) or DeepGEMM per_token_cast_to_fp8 / per_block_cast_to_fp8 / ceil_to_ue8m0 (CUDA eager
// arithmetic: amax * fl(1/448), x * fl(1/sf)); FP8 cast __nv_cvt_float_to_fp8 SATFINITE or NOSAT;
// swizzle = TE gemm_swizzled_scale_idx / cuBLAS 128x4 layout (spec A5).
#include <cuda_runtime.h>

#include "kernels/quant/quant_kernels.h"
#include "kernels/quant/quant_math.h"

namespace assay::kernels::quant {
namespace {

struct Fp8K {
  const uint16_t* x;
  int64_t M, N;
  Elem elem;
  bool sat, deepgemm, pow2, nanprop;
  float maxv, eps;
  int64_t gr, gc, nr, nc;  // group rows / cols, groups along M / N
  uint8_t* q;
  float *scale_inv, *scale, *amax;
};

// |x| of a bf16 as orderable fp32 bits; NaN -> 0 (dropped) or kept (its bits exceed Inf's).
__device__ __forceinline__ unsigned abs_bits(uint32_t b, bool nanprop) {
  b &= 0x7FFFu;
  if (!nanprop && b > 0x7F80u) return 0u;
  return b << 16;
}

// Eight bf16 codes x[8i .. 8i + 8) from one 16-byte read, as four words (code 2j in the low half
// of word j).
struct Words4 {
  uint32_t w[4];
  __device__ __forceinline__ uint32_t operator[](int j) const { return w[j]; }
};
__device__ __forceinline__ Words4 ldg_words4(const uint16_t* x, int64_t i) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(x) + i);
  return {{v.x, v.y, v.z, v.w}};
}

__device__ __forceinline__ Fp8Scale group_scale(const Fp8K& k, float a) {
  return k.deepgemm ? fp8_scale_deepgemm(a, k.pow2) : fp8_scale_te(a, k.maxv, k.pow2, k.eps);
}

// ---- per tensor
__global__ void fp8_tensor_amax_kernel(Fp8K k, unsigned* acc) {
  unsigned m = 0;
  const int64_t n = k.M * k.N;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool vec = (reinterpret_cast<uintptr_t>(k.x) & 15u) == 0;
  int64_t tail = 0;
  if (vec) {
    const int64_t nv = n / 8;
    for (int64_t i = tid; i < nv; i += stride) {
      const Words4 u = ldg_words4(k.x, i);
#pragma unroll
      for (int j = 0; j < 4; ++j) m = max(m, max(abs_bits(u[j] & 0xFFFFu, k.nanprop), abs_bits(u[j] >> 16, k.nanprop)));
    }
    tail = nv * 8;
  }
  for (int64_t i = tail + tid; i < n; i += stride) m = max(m, abs_bits(k.x[i], k.nanprop));
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(acc, m);
}

// Reads the accumulated amax (in k.amax[0]) or the override, writes amax / scale / scale_inv.
__global__ void fp8_tensor_scale_kernel(Fp8K k, bool given, float value) {
  const float a = given ? value : k.amax[0];
  const Fp8Scale s = group_scale(k, a);
  k.amax[0] = s.amax;
  k.scale[0] = s.scale;
  k.scale_inv[0] = s.scale_inv;
}

__global__ void fp8_tensor_cast_kernel(Fp8K k) {
  const float sc = k.scale[0];
  const int64_t n = k.M * k.N;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool vec = ((reinterpret_cast<uintptr_t>(k.x) | reinterpret_cast<uintptr_t>(k.q)) & 15u) == 0;
  int64_t tail = 0;
  if (vec) {
    const int64_t nv = n / 8;
    for (int64_t i = tid; i < nv; i += stride) {
      const Words4 u = ldg_words4(k.x, i);
      uint32_t o[2] = {0, 0};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t lo = fp8_encode(qm_mul(u2f(u[j] << 16), sc), k.elem, k.sat);
        const uint32_t hi = fp8_encode(qm_mul(u2f(u[j] & 0xFFFF0000u), sc), k.elem, k.sat);
        o[j >> 1] |= (lo | (hi << 8)) << ((j & 1) * 16);
      }
      reinterpret_cast<uint2*>(k.q)[i] = make_uint2(o[0], o[1]);
    }
    tail = nv * 8;
  }
  for (int64_t i = tail + tid; i < n; i += stride) k.q[i] = fp8_encode(qm_mul(bf16_to_f32(k.x[i]), sc), k.elem, k.sat);
}

// ---- grouped: one CTA per group
constexpr int kGroupThreads = 128;

__global__ void __launch_bounds__(kGroupThreads) fp8_group_kernel(Fp8K k) {
  __shared__ unsigned wmax[kGroupThreads / 32];
  __shared__ float s_scale;
  const int64_t gi = blockIdx.y, gj = blockIdx.x;
  const int64_t r0 = gi * k.gr, c0 = gj * k.gc;
  const int64_t r1 = min(k.M, r0 + k.gr), c1 = min(k.N, c0 + k.gc);
  const int64_t w = c1 - c0, cnt = (r1 - r0) * w;
  unsigned m = 0;
  for (int64_t e = threadIdx.x; e < cnt; e += kGroupThreads) {
    const int64_t i = r0 + e / w, j = c0 + e % w;
    m = max(m, abs_bits(k.x[i * k.N + j], k.nanprop));
  }
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) wmax[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned mm = 0;
    for (int i = 0; i < kGroupThreads / 32; ++i) mm = max(mm, wmax[i]);
    const Fp8Scale s = group_scale(k, u2f(mm));
    const int64_t g = gi * k.nc + gj;
    k.amax[g] = s.amax;
    k.scale[g] = s.scale;
    k.scale_inv[g] = s.scale_inv;
    s_scale = s.scale;
  }
  __syncthreads();
  const float sc = s_scale;
  for (int64_t e = threadIdx.x; e < cnt; e += kGroupThreads) {
    const int64_t i = r0 + e / w, j = c0 + e % w;
    k.q[i * k.N + j] = fp8_encode(qm_mul(bf16_to_f32(k.x[i * k.N + j]), sc), k.elem, k.sat);
  }
}

// ---- grouped, vectorized (quant_fp8_v2): N % 4 == 0, so each lane owns 4 consecutive columns
// (8 bytes of x, 4 bytes of q) that are all inside the row or all past its end.
constexpr int kVecThreads = 256;
constexpr int kGroupsPerWarp = 4;

__device__ __forceinline__ unsigned abs_max4(uint2 w, bool nanprop) {
  return max(max(abs_bits(w.x & 0xFFFFu, nanprop), abs_bits(w.x >> 16, nanprop)),
             max(abs_bits(w.y & 0xFFFFu, nanprop), abs_bits(w.y >> 16, nanprop)));
}
__device__ __forceinline__ uint32_t encode4(uint2 w, float sc, const Fp8K& k) {
  const uint32_t b0 = fp8_encode(qm_mul(u2f(w.x << 16), sc), k.elem, k.sat);
  const uint32_t b1 = fp8_encode(qm_mul(u2f(w.x & 0xFFFF0000u), sc), k.elem, k.sat);
  const uint32_t b2 = fp8_encode(qm_mul(u2f(w.y << 16), sc), k.elem, k.sat);
  const uint32_t b3 = fp8_encode(qm_mul(u2f(w.y & 0xFFFF0000u), sc), k.elem, k.sat);
  return b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
}
__device__ __forceinline__ void store_scale(const Fp8K& k, int64_t g, const Fp8Scale& s) {
  k.amax[g] = s.amax;
  k.scale[g] = s.scale;
  k.scale_inv[g] = s.scale_inv;
}

// 1x128: CTA = one row; warp w takes the row's groups w, w + 8, ..., kGroupsPerWarp at a time
// (loads first, then the reductions and stores). No 64-bit division on the way.
__global__ void __launch_bounds__(kVecThreads) fp8_1x128_vec_kernel(Fp8K k) {
  constexpr int kWarps = kVecThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = blockIdx.x;
  const uint16_t* xr = k.x + r * k.N;
  uint8_t* qr = k.q + r * k.N;
  for (int64_t j0 = warp; j0 < k.nc; j0 += kWarps * kGroupsPerWarp) {
    uint2 w[kGroupsPerWarp];
    bool in[kGroupsPerWarp];
#pragma unroll
    for (int u = 0; u < kGroupsPerWarp; ++u) {
      const int64_t c = (j0 + u * kWarps) * 128 + lane * 4;
      in[u] = c < k.N;
      w[u] = in[u] ? __ldg(reinterpret_cast<const uint2*>(xr + c)) : make_uint2(0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kGroupsPerWarp; ++u) {
      const int64_t j = j0 + u * kWarps;
      if (j >= k.nc) break;  // warp-uniform
      const unsigned m = __reduce_max_sync(0xffffffffu, in[u] ? abs_max4(w[u], k.nanprop) : 0u);
      const Fp8Scale s = group_scale(k, u2f(m));
      if (lane == 0) store_scale(k, r * k.nc + j, s);
      if (in[u]) *reinterpret_cast<uint32_t*>(qr + j * 128 + lane * 4) = encode4(w[u], s.scale, k);
    }
  }
}

// 128x128: one CTA per group; warp w holds rows w, w + 8, ..., w + 120 of it.
__global__ void __launch_bounds__(kVecThreads) fp8_128x128_vec_kernel(Fp8K k) {
  constexpr int kWarps = kVecThreads / 32, kRows = 128 / kWarps;
  __shared__ unsigned wmax[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t gi = blockIdx.y, gj = blockIdx.x;
  const int64_t c = gj * 128 + lane * 4;
  const bool col_in = c < k.N;
  uint2 w[kRows];
  unsigned m = 0;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t r = gi * 128 + warp + i * kWarps;
    w[i] = col_in && r < k.M ? __ldg(reinterpret_cast<const uint2*>(k.x + r * k.N + c)) : make_uint2(0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) m = max(m, abs_max4(w[i], k.nanprop));  // zero padding: |0| leaves the max
  m = __reduce_max_sync(0xffffffffu, m);
  if (lane == 0) wmax[warp] = m;
  __syncthreads();
  unsigned mm = 0;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) mm = max(mm, wmax[i]);
  const Fp8Scale s = group_scale(k, u2f(mm));
  if (threadIdx.x == 0) store_scale(k, gi * k.nc + gj, s);
  if (!col_in) return;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t r = gi * 128 + warp + i * kWarps;
    if (r < k.M) *reinterpret_cast<uint32_t*>(k.q + r * k.N + c) = encode4(w[i], s.scale, k);
  }
}

__global__ void fp8_dequant_kernel(Fp8K k, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= k.M * k.N) return;
  const int64_t r = i / k.N, c = i % k.N;
  const float si = k.scale_inv[(r / k.gr) * k.nc + c / k.gc];
  out[i] = qm_mul(elem_decode(k.q[i], k.elem), si);
}

__global__ void swizzle_kernel(const uint8_t* sf, int64_t rows, int64_t cols, int64_t C, int64_t total, uint8_t* out) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= total) return;
  // off(r, c) = ((r/128)*(C/4) + c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + c%4
  const int64_t tile = o / 512, in = o % 512;
  const int64_t rt = tile / (C / 4), ct = tile % (C / 4);
  const int64_t r = rt * 128 + ((in % 16) / 4) * 32 + in / 16;
  const int64_t c = ct * 4 + in % 4;
  out[o] = (r < rows && c < cols) ? sf[r * cols + c] : static_cast<uint8_t>(0);
}


// Validates the arguments and fills the kernel parameters; false on bad arguments.
bool fp8_params(const Fp8Args& a, Fp8K& k) {
  if (a.M < 1 || a.N < 1 || !a.x || !a.q || !a.scale || !a.scale_inv || !a.amax || a.elem < 0 || a.elem > 1 ||
      a.gran < 0 || a.gran > 3)
    return false;
  k = Fp8K{};
  k.x = a.x;
  k.M = a.M;
  k.N = a.N;
  k.elem = static_cast<Elem>(a.elem);
  k.sat = a.satfinite;
  k.deepgemm = a.deepgemm;
  k.pow2 = a.pow2;
  k.nanprop = a.deepgemm;  // torch.amax propagates NaN; TE's amax drops it
  k.maxv = a.elem == 0 ? 448.0f : 57344.0f;
  k.eps = a.epsilon;
  k.q = a.q;
  k.scale_inv = a.scale_inv;
  k.scale = a.scale;
  k.amax = a.amax;
  switch (a.gran) {
    case 0: k.gr = a.M, k.gc = a.N; break;
    case 1: k.gr = 1, k.gc = a.N; break;
    case 2: k.gr = 1, k.gc = 128; break;
    default: k.gr = 128, k.gc = 128; break;
  }
  k.nr = (a.M + k.gr - 1) / k.gr;
  k.nc = (a.N + k.gc - 1) / k.gc;
  return true;
}

cudaError_t fp8_dequant(const Fp8K& k, float* xhat, cudaStream_t s) {
  if (!xhat) return cudaSuccess;
  const int th = 256;
  fp8_dequant_kernel<<<static_cast<unsigned>((k.M * k.N + th - 1) / th), th, 0, s>>>(k, xhat);
  return cudaGetLastError();
}

}  // namespace

bool quant_fp8_v2_supports(int gran, int64_t N) { return (gran == 2 || gran == 3) && N % 4 == 0; }

cudaError_t quant_fp8_v1(const Fp8Args& a, cudaStream_t s) {
  Fp8K k;
  if (!fp8_params(a, k)) return cudaErrorInvalidValue;
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t n = a.M * a.N;
  if (a.gran == 0) {
    const int th = 256;
    int64_t blocks = (n / 8 + th - 1) / th;
    blocks = blocks < 1 ? 1 : (blocks > sms * 8 ? sms * 8 : blocks);
    if (!a.amax_given) {
      if (cudaError_t e = cudaMemsetAsync(a.amax, 0, sizeof(float), s); e != cudaSuccess) return e;
      fp8_tensor_amax_kernel<<<static_cast<unsigned>(blocks), th, 0, s>>>(k, reinterpret_cast<unsigned*>(a.amax));
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    fp8_tensor_scale_kernel<<<1, 1, 0, s>>>(k, a.amax_given, a.amax_value);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    fp8_tensor_cast_kernel<<<static_cast<unsigned>(blocks), th, 0, s>>>(k);
  } else {
    if (k.nr > 65535) return cudaErrorInvalidValue;
    fp8_group_kernel<<<dim3(static_cast<unsigned>(k.nc), static_cast<unsigned>(k.nr)), kGroupThreads, 0, s>>>(k);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return fp8_dequant(k, a.xhat, s);
}

cudaError_t quant_fp8_v2(const Fp8Args& a, cudaStream_t s) {
  Fp8K k;
  if (!fp8_params(a, k) || !quant_fp8_v2_supports(a.gran, a.N)) return cudaErrorInvalidValue;
  if ((reinterpret_cast<uintptr_t>(a.x) & 7u) != 0 || (reinterpret_cast<uintptr_t>(a.q) & 3u) != 0)
    return cudaErrorMisalignedAddress;
  if (a.gran == 2) {
    if (k.M > 0x7FFFFFFF) return cudaErrorInvalidValue;
    fp8_1x128_vec_kernel<<<static_cast<unsigned>(k.M), kVecThreads, 0, s>>>(k);
  } else {
    if (k.nr > 65535) return cudaErrorInvalidValue;
    fp8_128x128_vec_kernel<<<dim3(static_cast<unsigned>(k.nc), static_cast<unsigned>(k.nr)), kVecThreads, 0, s>>>(k);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return fp8_dequant(k, a.xhat, s);
}

namespace {
// Fake-quant forward / backward from the codes and scales quant_fp8_v1 wrote (per tensor: group
// 0; per channel: group = row).
__global__ void fake_quant_kernel(Fp8K k, const float* dy, bool clipped, float* y, float* dx) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= k.M * k.N) return;
  const int64_t g = k.gr == 1 ? i / k.N : 0;
  y[i] = qm_mul(elem_decode(k.q[i], k.elem), k.scale_inv[g]);
  const float xs = qm_mul(bf16_to_f32(k.x[i]), k.scale[g]);
  dx[i] = (!clipped || qm_abs(xs) <= k.maxv) ? dy[i] : 0.0f;  // NaN xs: outside (|NaN| <= max is false)
}
}  // namespace

cudaError_t quant_fake_quant_v1(const FakeQuantArgs& a, cudaStream_t s) {
  if (!a.dy || !a.y || !a.dx || (a.q.gran != 0 && a.q.gran != 1) || a.q.M < 1 || a.q.N < 1) return cudaErrorInvalidValue;
  const int64_t n = a.q.M * a.q.N, groups = a.q.gran == 0 ? 1 : a.q.M;
  void* ws = nullptr;
  if (cudaError_t e = cudaMallocAsync(&ws, static_cast<size_t>(n) + 3 * sizeof(float) * groups + 16, s); e != cudaSuccess)
    return e;
  Fp8Args q = a.q;
  q.amax = static_cast<float*>(ws);
  q.scale = q.amax + groups;
  q.scale_inv = q.scale + groups;
  q.q = reinterpret_cast<uint8_t*>(q.scale_inv + groups);
  q.xhat = nullptr;
  cudaError_t err = quant_fp8_v1(q, s);
  Fp8K k;
  if (err == cudaSuccess && !fp8_params(q, k)) err = cudaErrorInvalidValue;
  if (err == cudaSuccess) {
    const int th = 256;
    fake_quant_kernel<<<static_cast<unsigned>((n + th - 1) / th), th, 0, s>>>(k, a.dy, a.clipped_ste, a.y, a.dx);
    err = cudaGetLastError();
  }
  const cudaError_t fe = cudaFreeAsync(ws, s);
  return err != cudaSuccess ? err : fe;
}

cudaError_t quant_swizzle_v1(const uint8_t* sf, int64_t rows, int64_t cols, uint8_t* out, cudaStream_t s) {
  if (rows < 1 || cols < 1 || !sf || !out) return cudaErrorInvalidValue;
  const int64_t R = (rows + 127) / 128 * 128, C = (cols + 3) / 4 * 4, total = R * C;
  const int th = 256;
  swizzle_kernel<<<static_cast<unsigned>((total + th - 1) / th), th, 0, s>>>(sf, rows, cols, C, total, out);
  return cudaGetLastError();
}

}  // namespace assay::kernels::quant
