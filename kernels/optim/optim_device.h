// Device helpers shared by the optimizer kernels (included by kernels/optim/*.cu only): bf16
// conversions, torch's lerp, 16-byte packs, the deterministic block sum and the chunked view of a
// segment list; and their host side (optim_common.cu): grid sizes, segmented sums of squares,
// the aligned-or-scalar launch of the elementwise kernels, carved scratch.
//
// Rounding discipline: every fp32 operation that the emulated implementation rounds separately is
// written with an explicit-rounding intrinsic (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn,
// __fsqrt_rn), which nvcc never contracts; every FMA of the implementation is an explicit
// __fmaf_rn. So the arithmetic does not depend on nvcc's --fmad choices.
// BF16 codes are uint16_t; conversions follow reference/optim (bf16_rne: RNE, NaN -> 0x7FC0|sign).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim::dev {

__device__ __forceinline__ float bf2f(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ uint16_t f2bf(float x) {
  uint32_t b = __float_as_uint(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>(((b >> 16) & 0x8000u) | 0x7FC0u);
  b += 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
__device__ __forceinline__ float rbf(float x) { return bf2f(f2bf(x)); }  // one bf16 store + reload

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(uint16_t b) { return bf2f(b); }
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ uint16_t from_f<uint16_t>(float x) { return f2bf(x); }

// PyTorch's CUDA lerp (ATen Lerp.h), opmath float, as nvcc compiles it.
__device__ __forceinline__ float torch_lerp(float self, float end, float w) {
  const float diff = __fsub_rn(end, self);
  return fabsf(w) < 0.5f ? __fmaf_rn(w, diff, self) : __fmaf_rn(-diff, __fsub_rn(1.0f, w), end);
}

// V consecutive elements, loaded / stored as one (16-byte for V * sizeof(T) == 16) access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T x[V];
};
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> ld(const T* p, int64_t i) {
  return *reinterpret_cast<const Pack<T, V>*>(p + i);
}
template <typename T, int V>
__device__ __forceinline__ void st(T* p, int64_t i, const Pack<T, V>& v) {
  *reinterpret_cast<Pack<T, V>*>(p + i) = v;
}

// Deterministic block sum (fixed shuffle tree, then a fixed tree over the warps). Every thread
// gets the result. blockDim.x must be a multiple of 32 and <= 1024. Uses 33 floats of shared memory.
__device__ __forceinline__ float block_sum(float x) {
  __shared__ float warp_part[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_down_sync(0xFFFFFFFFu, x, o));
  if (lane == 0) warp_part[wid] = x;
  __syncthreads();
  if (wid == 0) {
    float y = lane < nw ? warp_part[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) y = __fadd_rn(y, __shfl_down_sync(0xFFFFFFFFu, y, o));
    if (lane == 0) total = y;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // the shared slots may be reused by a following call
  return r;
}

// Chunked view of a segment list: block b of a chunked grid handles chunk b; chunks never cross
// a segment boundary. chunk_begin[s] is the first chunk of segment s (chunk_begin[count] = total).
constexpr int kChunk = 4096;
constexpr int kRedThreads = 256;
struct ChunkTable {
  int count;
  int64_t offset[kMaxSegments];
  int64_t size[kMaxSegments];
  int chunk_begin[kMaxSegments + 1];
};
__device__ __forceinline__ int segment_of_chunk(const ChunkTable& t, int b) {
  int s = 0;
  for (int k = 1; k < t.count; ++k)
    if (t.chunk_begin[k] <= b) s = k;
  return s;
}

}  // namespace assay::kernels::optim::dev

namespace assay::kernels::optim {
// Host helpers (defined in optim_common.cu).
int grid_for(const void* kernel, int threads, int64_t items);  // min(ceil(items/threads), resident blocks)
dev::ChunkTable make_chunks(const Segments& s);                // throws nothing; counts chunks
int total_chunks(const dev::ChunkTable& t);
// Segmented fixed-order sums of squares: per-chunk partials, then one value per segment.
cudaError_t seg_sumsq(const dev::ChunkTable& t, const void* x, StoreType type, float* partial, float* seg_out,
                      cudaStream_t stream);
cudaError_t seg_finalize(const dev::ChunkTable& t, const float* partial, float* seg_out, cudaStream_t stream);

// Block size of the grid-stride elementwise kernels (adam.cu, sgd.cu, lion.cu, bf16_copy.cu, scaler.cu).
constexpr int kThreads = 256;
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Launches a grid-stride elementwise kernel: `packed` (V elements per 16-byte access, over n / V
// packs) when every pointer is 16-byte aligned (`aligned`), else `scalar` (one element at a time).
template <typename Args>
cudaError_t launch_elementwise(void (*packed)(Args), void (*scalar)(Args), int V, bool aligned, const Args& a,
                               int64_t n, cudaStream_t stream) {
  if (aligned) {
    packed<<<grid_for(reinterpret_cast<const void*>(packed), kThreads, n / V + 1), kThreads, 0, stream>>>(a);
  } else {
    scalar<<<grid_for(reinterpret_cast<const void*>(scalar), kThreads, n), kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

// Scratch carved from one stream-ordered allocation (256-byte aligned pieces).
inline size_t align256(size_t b) { return (b + 255) & ~static_cast<size_t>(255); }
struct Scratch {
  char* base = nullptr;
  size_t used = 0;
  template <typename T>
  T* take(size_t count) {
    T* p = reinterpret_cast<T*>(base + used);
    used += align256(count * sizeof(T));
    return p;
  }
};
}  // namespace assay::kernels::optim
