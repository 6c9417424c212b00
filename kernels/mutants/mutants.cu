// Deliberately broken scaled_add kernels, built only for the GPU tests as a plugin
// (libassay_mutants.so) that production runs never load. Each one has ONE known defect class, and
// the tests (verify/tests/gpu/test_gate_gpu.cpp) assert the verdict the gate must give it:
//
//   mut_oob_far      writes 2 TiB past its output: illegal address        -> Failed (CUDA error)
//   mut_hang         never terminates                                      -> Hung (watchdog)
//   mut_segv         dereferences NULL in its host launch code             -> Failed (SIGSEGV)
//   mut_past_end     correct, plus one element written past the end        -> Failed (canary)
//   mut_unwritten    leaves one output element unwritten                   -> Incorrect (poison NaN)
//   mut_nondet       run 0 correct, later runs flip one low bit            -> Incorrect (not reproducible)
//   mut_oob_alloc    correct, plus one write just past the allocation      -> memcheck error
//   mut_race         shared-memory read of another warp's slot, no barrier -> racecheck hazard
//   mut_syncwarp     __syncwarp with a mask that excludes the caller       -> synccheck error
//   mut_uninit       reads a scratch buffer it never initialized           -> initcheck error
//
// Tensors: x, y [B, T, D] bf16, out [B, T, D] bf16 (the int_exact golden); otherwise NotSupported.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "kernels/plugin/assay_plugin.h"

namespace {

constexpr int64_t kGuardElems = 4096 / 2;  // verify/run/worker.h kGuardBytes, in bf16 elements


__device__ __forceinline__ __nv_bfloat16 f(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t i, float a, float b) {
  return __float2bfloat16_rn(fmaf(a, __bfloat162float(x[i]), b * __bfloat162float(y[i])));
}

enum Mode { kOobFar, kHang, kSegv, kPastEnd, kUnwritten, kNondet, kOobAlloc, kRace, kSyncwarp, kUninit };

__global__ void mutant(const __nv_bfloat16* x, const __nv_bfloat16* y, __nv_bfloat16* out, float a, float b, int64_t n,
                       int mode, const float* scratch, unsigned run) {
  __shared__ float sm[256];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (mode == kHang) {
    while (clock64() != -1) {
    }
  }
  if (mode == kRace) {
    // Each thread publishes x, then reads the slot of a thread in another warp with no
    // __syncthreads in between: a read-after-write hazard. The value read is used only in a
    // comparison that never holds, so the output stays right.
    sm[threadIdx.x] = i < n ? __bfloat162float(x[i]) : 0.f;
    const float other = sm[(threadIdx.x + 32) % blockDim.x];
    if (i < n) out[i] = other == 1e30f ? __float2bfloat16_rn(0.f) : f(x, y, i, a, b);
    return;
  }
  if (mode == kSyncwarp) {
    __syncwarp(0x0000FFFFu);  // lanes 16..31 are not in the mask: invalid
  }
  if (i < n) {
    if (mode == kUnwritten && i == n / 2) {
      // skip
    } else {
      __nv_bfloat16 v = f(x, y, i, a, b);
      if (mode == kNondet && i == 0 && run > 0) {
        unsigned short bits;
        memcpy(&bits, &v, 2);
        bits ^= 1u;
        memcpy(&v, &bits, 2);
      }
      if (mode == kUninit && scratch[i % 64] == 1e30f) v = __float2bfloat16_rn(0.f);
      out[i] = v;
    }
  }
  if (i == 0) {
    if (mode == kOobFar) out[(int64_t{1} << 40)] = __float2bfloat16_rn(1.f);
    if (mode == kPastEnd) out[n] = __float2bfloat16_rn(1.f);
    if (mode == kOobAlloc) out[n + kGuardElems] = __float2bfloat16_rn(1.f);
  }
}

const assay_tensor* find(const assay_tensor* t, int n, const char* name) {
  for (int i = 0; i < n; ++i)
    if (std::strcmp(t[i].name, name) == 0) return &t[i];
  return nullptr;
}

int can_implement(const assay_case* c, char* reason, size_t len) {
  const auto *x = find(c->inputs, c->n_inputs, "x"), *y = find(c->inputs, c->n_inputs, "y");
  const auto* o = find(c->outputs, c->n_outputs, "out");
  if (!x || !y || !o) return std::snprintf(reason, len, "needs x, y, out"), 0;
  if (std::strcmp(x->dtype, "bf16") || std::strcmp(y->dtype, "bf16") || std::strcmp(o->dtype, "bf16"))
    return std::snprintf(reason, len, "mutants implement bf16 in/out only"), 0;
  return 1;
}

template <int M>
int launch(const assay_case* c, void* stream, char* err, size_t len) {
  const auto *x = find(c->inputs, c->n_inputs, "x"), *y = find(c->inputs, c->n_inputs, "y");
  const auto* o = find(c->outputs, c->n_outputs, "out");
  if (M == kSegv) {
    volatile int* p = nullptr;
    *p = 42;  // host-side crash inside the kernel library
  }
  double a = 1, b = 1;
  c->get_double(c, "alpha", &a);
  c->get_double(c, "beta", &b);
  const int64_t n = o->numel;
  float* scratch = nullptr;
  if (M == kUninit && cudaMalloc(&scratch, 64 * sizeof(float)) != cudaSuccess)
    return std::snprintf(err, len, "cudaMalloc scratch failed"), 1;
  static unsigned runs = 0;  // host-side count: run 0 vs later runs of this process
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  mutant<<<blocks ? blocks : 1, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(x->data),
                                            static_cast<const __nv_bfloat16*>(y->data),
                                            static_cast<__nv_bfloat16*>(o->data), static_cast<float>(a),
                                            static_cast<float>(b), n, M, scratch, runs++);
  cudaError_t e = cudaGetLastError();
  if (scratch) {
    cudaStreamSynchronize(s);
    cudaFree(scratch);
  }
  if (e != cudaSuccess) return std::snprintf(err, len, "launch: %s", cudaGetErrorString(e)), 1;
  return 0;
}

#define MUT(name, mode, flags, what) {"scaled_add", name, what, flags, can_implement, launch<mode>}
const assay_kernel kKernels[] = {
    MUT("mut_oob_far", kOobFar, 0, "writes 2 TiB past its output (illegal address)"),
    MUT("mut_hang", kHang, 0, "never terminates"),
    MUT("mut_segv", kSegv, 0, "NULL dereference in host launch code"),
    MUT("mut_past_end", kPastEnd, 0, "writes one element past its output (inside the guard band)"),
    MUT("mut_unwritten", kUnwritten, 0, "leaves output element n/2 unwritten"),
    MUT("mut_nondet", kNondet, 0, "flips one low bit of out[0] after the first run"),
    MUT("mut_oob_alloc", kOobAlloc, 0, "writes one element past the end of the allocation (after the guard band)"),
    MUT("mut_race", kRace, 0, "shared-memory read-after-write across warps without __syncthreads"),
    MUT("mut_syncwarp", kSyncwarp, 0, "__syncwarp(0xFFFF) called by lanes outside the mask"),
    MUT("mut_uninit", kUninit, 0, "reads a cudaMalloc'd scratch buffer it never wrote"),
};
const assay_plugin kPlugin = {ASSAY_PLUGIN_ABI_VERSION, sizeof(assay_plugin), "assay test mutants",
                              static_cast<int32_t>(sizeof kKernels / sizeof kKernels[0]), kKernels};

}  // namespace

extern "C" __attribute__((visibility("default"))) const assay_plugin* assay_plugin_entry(void) { return &kPlugin; }
