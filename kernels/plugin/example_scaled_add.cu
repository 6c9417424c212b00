// The in-tree example of an assay plugin (kernels/plugin/assay_plugin.h): scaled_add
// out = alpha * x + beta * y as an external library would ship it.
//
// Tensors: x, y [B, T, D] bf16 or fp16 (the same dtype), out [B, T, D] bf16, fp16 or fp32.
// Math: fp32 fmaf(alpha, x, beta * y), rounded to nearest even to the output dtype.
// Build: nvcc -shared -Xcompiler -fPIC -o libmy_plugin.so example_scaled_add.cu (see
// kernels/CMakeLists.txt, assay_add_plugin); run: assay verify --plugin libmy_plugin.so.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "kernels/plugin/assay_plugin.h"

namespace {

__device__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ void store(float* p, int64_t i, float v) { p[i] = v; }

template <class In, class Out>
__global__ void scaled_add(const In* x, const In* y, Out* out, float alpha, float beta, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(out, i, fmaf(alpha, load(x, i), beta * load(y, i)));
}

const assay_tensor* find(const assay_tensor* t, int n, const char* name) {
  for (int i = 0; i < n; ++i)
    if (std::strcmp(t[i].name, name) == 0) return &t[i];
  return nullptr;
}

bool is(const assay_tensor* t, const char* dt) { return std::strcmp(t->dtype, dt) == 0; }

int can_implement(const assay_case* c, char* reason, size_t len) {
  const auto *x = find(c->inputs, c->n_inputs, "x"), *y = find(c->inputs, c->n_inputs, "y");
  const auto* o = find(c->outputs, c->n_outputs, "out");
  if (!x || !y || !o) return std::snprintf(reason, len, "needs inputs x, y and output out"), 0;
  if (std::strcmp(x->dtype, y->dtype) != 0 || !(is(x, "bf16") || is(x, "fp16")))
    return std::snprintf(reason, len, "x and y must both be bf16 or both fp16 (got %s, %s)", x->dtype, y->dtype), 0;
  if (!(is(o, "bf16") || is(o, "fp16") || is(o, "fp32")))
    return std::snprintf(reason, len, "out must be bf16, fp16 or fp32 (got %s)", o->dtype), 0;
  return 1;
}

template <class In, class Out>
cudaError_t go(const assay_tensor* x, const assay_tensor* y, const assay_tensor* o, float a, float b, cudaStream_t s) {
  const int64_t n = o->numel;
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 65535 * 8 ? want : 65535 * 8);
  scaled_add<In, Out><<<blocks, threads, 0, s>>>(static_cast<const In*>(x->data), static_cast<const In*>(y->data),
                                                 static_cast<Out*>(o->data), a, b, n);
  return cudaGetLastError();
}

int launch(const assay_case* c, void* stream, char* err, size_t len) {
  const auto *x = find(c->inputs, c->n_inputs, "x"), *y = find(c->inputs, c->n_inputs, "y");
  const auto* o = find(c->outputs, c->n_outputs, "out");
  double alpha = 1.0, beta = 1.0;
  c->get_double(c, "alpha", &alpha);
  c->get_double(c, "beta", &beta);
  const auto s = static_cast<cudaStream_t>(stream);
  const float a = static_cast<float>(alpha), b = static_cast<float>(beta);
  cudaError_t e;
  if (is(x, "bf16")) {
    if (is(o, "bf16")) e = go<__nv_bfloat16, __nv_bfloat16>(x, y, o, a, b, s);
    else if (is(o, "fp16")) e = go<__nv_bfloat16, __half>(x, y, o, a, b, s);
    else e = go<__nv_bfloat16, float>(x, y, o, a, b, s);
  } else {
    if (is(o, "bf16")) e = go<__half, __nv_bfloat16>(x, y, o, a, b, s);
    else if (is(o, "fp16")) e = go<__half, __half>(x, y, o, a, b, s);
    else e = go<__half, float>(x, y, o, a, b, s);
  }
  if (e != cudaSuccess) return std::snprintf(err, len, "launch: %s", cudaGetErrorString(e)), 1;
  return 0;
}

const assay_kernel kKernels[] = {
    {"scaled_add", "example_scaled_add", "example plugin: fp32 fmaf, any of bf16/fp16 in, bf16/fp16/fp32 out", 0,
     can_implement, launch},
};
const assay_plugin kPlugin = {ASSAY_PLUGIN_ABI_VERSION, sizeof(assay_plugin), "assay example plugin", 1, kKernels};

}  // namespace

extern "C" __attribute__((visibility("default"))) const assay_plugin* assay_plugin_entry(void) { return &kPlugin; }
