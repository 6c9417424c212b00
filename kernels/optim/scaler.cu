// Dynamic loss scaling kernels (op optim, optimizer = scaler): torch GradScaler
// (_amp_update_scale_, unscale_) and Megatron DynamicGradScaler.
//
// Tensors: found_inf [S] int32 per step -> scale [S] fp32, growth_tracker [S] int64,
// hysteresis [S] int64 (Megatron); unscale_: g [N] fp32 -> g_out [N] fp32, found_inf [1] int32.
// Variants:
//   v1 (this file): the state machine in one thread (a few scalars per step); unscale_ grid-stride
//     with an order-independent integer flag.
// Upstream conventions (reference/optim/scaler.cpp; spec B6): torch 2.11 refuses growth to a
//   non-finite scale (overflow_guard); Megatron backs off only when hysteresis runs out, floors
//   at min_scale, and has no overflow guard.
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

// ---------------------------------------------------------------------------------------------
// Loss scaler
// ---------------------------------------------------------------------------------------------
namespace {
struct ScalerArgs {
  int megatron, overflow_guard;
  float scale0, growth, backoff, min_scale;
  int64_t interval, hysteresis;
};
// One thread: the state machine is sequential by nature (a few scalars per step).
__global__ void scaler_kernel(const ScalerArgs a, const int* found_inf, int64_t steps, float* scale_out,
                              int64_t* tracker_out, int64_t* hyst_out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float scale = a.scale0;
  int64_t tracker = 0, hyst = a.hysteresis;
  for (int64_t k = 0; k < steps; ++k) {
    const bool inf = found_inf[k] != 0;
    if (!a.megatron) {  // torch _amp_update_scale_
      if (inf) {
        scale = __fmul_rn(scale, a.backoff);
        tracker = 0;
      } else if (tracker + 1 == a.interval) {
        const float ns = __fmul_rn(scale, a.growth);
        if (!a.overflow_guard || isfinite(ns)) scale = ns;
        tracker = 0;
      } else {
        tracker += 1;
      }
    } else {  // Megatron DynamicGradScaler.update
      if (inf) {
        tracker = 0;
        hyst -= 1;
        if (hyst <= 0) scale = fmaxf(__fmul_rn(scale, a.backoff), a.min_scale);
      } else {
        tracker += 1;
        if (tracker == a.interval) {
          tracker = 0;
          hyst = a.hysteresis;
          scale = __fmul_rn(scale, a.growth);
        }
      }
    }
    scale_out[k] = scale;
    tracker_out[k] = tracker;
    if (hyst_out) hyst_out[k] = hyst;
  }
}
__global__ void unscale_kernel(float inv, const float* g, float* out, int64_t n, int* found_inf) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float e = g[i];
    bad |= !isfinite(e);
    out[i] = inv == 1.0f ? e : __fmul_rn(e, inv);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(found_inf, 1);
}
}  // namespace

cudaError_t scaler_updates(const ScalerConfig& c, const int* found_inf, int64_t steps, float* scale_out,
                           int64_t* growth_tracker_out, int64_t* hysteresis_out, cudaStream_t stream) {
  if (steps <= 0) return cudaSuccess;
  const ScalerArgs a{c.megatron, c.overflow_guard, static_cast<float>(c.init_scale),
                     static_cast<float>(c.growth_factor), static_cast<float>(c.backoff_factor),
                     static_cast<float>(c.min_scale), c.growth_interval, c.hysteresis};
  scaler_kernel<<<1, 32, 0, stream>>>(a, found_inf, steps, scale_out, growth_tracker_out,
                                      c.megatron ? hysteresis_out : nullptr);
  return cudaGetLastError();
}

cudaError_t unscale_grads(float inv_scale, const float* g_in, float* g_out, int64_t n, int* found_inf,
                          cudaStream_t stream) {
  if (cudaError_t e = cudaMemsetAsync(found_inf, 0, sizeof(int), stream); e != cudaSuccess) return e;
  if (n <= 0) return cudaSuccess;
  const void* k = reinterpret_cast<const void*>(&unscale_kernel);
  unscale_kernel<<<grid_for(k, kThreads, n), kThreads, 0, stream>>>(inv_scale, g_in, g_out, n, found_inf);
  return cudaGetLastError();
}

}  // namespace assay::kernels::optim
