// kernels/mamba3/mamba3_fwd.cu: mamba3_siso_chunked and mamba3_mimo_chunked, the Mamba-3 chunked
// forward (SISO is rank 1): one CTA of 256 threads per (sequence, head), fp32 SIMT arithmetic (no
// tensor cores), the fp32 P x N state in shared memory, the chunk's rotated q / k tiles
// [chunk, rank, N] staged through the flattened shared-memory view [chunk*rank, N] (row t*R + r:
// upstream TileLang's qk_dot_shared tile) from which the decay-masked score matrix is computed.
// The body is mamba3_body.h (shared with the CPU transcription).
//
// Tensors (kernels/mamba3/mamba3.h): Q, K [B, T, (R,) G, N], V, Z [B, T, H, P], ADT, DT, Trap
// [B, H, T], Q_bias, K_bias [H, (R,) N], Angles [B, T, H, A], D [H], MIMO_V / MIMO_Z / MIMO_Out
// [H, R, P], outproj_norm_weight [H, P], the four input states, cu_seqlens [NS + 1] int32 ->
// out [B, T, (R,) H, P], final_angle, final_ssm, final_k, final_v, chunk_states [C, H, P, N].
#include <cuda_runtime.h>

#include "kernels/mamba3/mamba3.h"
#include "kernels/mamba3/mamba3_body.h"

namespace assay::kernels::mamba3 {
namespace {

struct BlockSync {
  __device__ void operator()() const { __syncthreads(); }
};

__global__ void __launch_bounds__(kThreads) mamba3_fwd_kernel(const Params p) {
  extern __shared__ float sm[];
  mamba3_block(p, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), sm, static_cast<int>(threadIdx.x),
               static_cast<int>(blockDim.x), BlockSync{});
}

}  // namespace

cudaError_t mamba3_fwd(const Params& p, cudaStream_t s) {
  if (p.NS <= 0) return cudaSuccess;
  const int64_t bytes = smem_floats(p.N, p.P, p.L, p.R, p.S) * static_cast<int64_t>(sizeof(float));
  if (bytes > kMaxSmemBytes) return cudaErrorInvalidConfiguration;
  if (cudaError_t e = cudaFuncSetAttribute(mamba3_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes));
      e != cudaSuccess)
    return e;
  mamba3_fwd_kernel<<<dim3(static_cast<unsigned>(p.NS), static_cast<unsigned>(p.H)), kThreads, static_cast<size_t>(bytes), s>>>(p);
  return cudaGetLastError();
}

}  // namespace assay::kernels::mamba3
