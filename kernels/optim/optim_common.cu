// Host helpers shared by the optimizer kernels (declared in optim_device.h): grid sizes, the
// chunked view of a segment list and its segmented sums of squares (LAMB, clipping, Muon's
// Frobenius norm).
//
// Tensors: x [N] fp32 or bf16 holding T segments back to back (Segments) -> partial [chunks] fp32,
// seg_out [T] fp32.
// Variants:
//   v1 (this file): deterministic two passes with a fixed order: pass 1 one fp32 partial per
//     chunk of 4096 elements (each thread a fixed strided sequence of fma, then the fixed block
//     tree), pass 2 one sum per segment (fixed strided sequence + tree). No float atomics.
// Upstream conventions: none of their own (the fp32 norms of the optimizers that use them are
//   tolerance quantities, reference/optim/optim.h).
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::to_f;

int grid_for(const void* kernel, int threads, int64_t items) {
  int device = 0, sms = 1, per_sm = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess || per_sm < 1)
    per_sm = 1;
  const int64_t need = std::max<int64_t>(1, (items + threads - 1) / threads);
  return static_cast<int>(std::min<int64_t>(need, static_cast<int64_t>(sms) * per_sm));
}

// ---------------------------------------------------------------------------------------------
// Segmented sums of squares (shared by LAMB, clipping, Muon's Frobenius norm)
// ---------------------------------------------------------------------------------------------
dev::ChunkTable make_chunks(const Segments& s) {
  dev::ChunkTable t{};
  t.count = s.count;
  int c = 0;
  for (int k = 0; k < s.count; ++k) {
    t.offset[k] = s.offset[k];
    t.size[k] = s.size[k];
    t.chunk_begin[k] = c;
    c += static_cast<int>((s.size[k] + dev::kChunk - 1) / dev::kChunk);
  }
  t.chunk_begin[s.count] = c;
  return t;
}
int total_chunks(const dev::ChunkTable& t) { return t.chunk_begin[t.count]; }

namespace {
// Pass 1: block b sums x^2 over its chunk (each thread a fixed strided sequence, then the fixed
// block tree) into partial[b].
template <typename T>
__global__ void __launch_bounds__(dev::kRedThreads) seg_sumsq_kernel(const dev::ChunkTable t, const T* x,
                                                                      float* partial) {
  const int b = blockIdx.x;
  const int s = dev::segment_of_chunk(t, b);
  const int64_t start = static_cast<int64_t>(b - t.chunk_begin[s]) * dev::kChunk;
  const int64_t end = start + dev::kChunk < t.size[s] ? start + dev::kChunk : t.size[s];
  const T* base = x + t.offset[s];
  float acc = 0.0f;
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    const float e = to_f(base[i]);
    acc = __fmaf_rn(e, e, acc);
  }
  const float r = dev::block_sum(acc);
  if (threadIdx.x == 0) partial[b] = r;
}
// Pass 2: block s sums the partials of segment s in a fixed order.
__global__ void __launch_bounds__(dev::kRedThreads) seg_finalize_kernel(const dev::ChunkTable t, const float* partial,
                                                                         float* seg_out) {
  const int s = blockIdx.x;
  float acc = 0.0f;
  for (int c = t.chunk_begin[s] + static_cast<int>(threadIdx.x); c < t.chunk_begin[s + 1]; c += blockDim.x)
    acc = __fadd_rn(acc, partial[c]);
  const float r = dev::block_sum(acc);
  if (threadIdx.x == 0) seg_out[s] = r;
}
}  // namespace

cudaError_t seg_sumsq(const dev::ChunkTable& t, const void* x, StoreType type, float* partial, float* seg_out,
                      cudaStream_t stream) {
  const int nc = total_chunks(t);
  if (nc > 0) {
    if (type == StoreType::f32)
      seg_sumsq_kernel<float><<<nc, dev::kRedThreads, 0, stream>>>(t, static_cast<const float*>(x), partial);
    else
      seg_sumsq_kernel<uint16_t><<<nc, dev::kRedThreads, 0, stream>>>(t, static_cast<const uint16_t*>(x), partial);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return seg_finalize(t, partial, seg_out, stream);
}

cudaError_t seg_finalize(const dev::ChunkTable& t, const float* partial, float* seg_out, cudaStream_t stream) {
  if (t.count > 0) seg_finalize_kernel<<<t.count, dev::kRedThreads, 0, stream>>>(t, partial, seg_out);
  return cudaGetLastError();
}

}  // namespace assay::kernels::optim
