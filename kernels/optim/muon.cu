// Muon: momentum, Newton-Schulz orthogonalisation with cuBLAS bf16 GEMMs, scale and update.
//
// Tensors: g, p, buf [M, K] fp32 (inputs; buf_out, p_out fp32), update [M, K] fp32 (bf16 values).
// Work: X [R, C] bf16 (R = min side when tall: M > K -> X = G^T, R = K, C = M), A, B [R, R] bf16.
// Variants:
//   v1 (this file): Keller Jordan's zeropower_via_newtonschulz5 op for op: X = bf16(G);
//     X /= bf16(bf16(||X||_F) + eps) (deterministic two-pass fp32 norm); per step
//     A = X X^T, B = b A + (c A) A, X = a X + B X, each GEMM a cublasGemmEx with bf16 inputs and
//     output and fp32 accumulation (CUBLAS_COMPUTE_32F), each scalar-times-tensor and add rounded
//     to bf16 by small elementwise kernels (Python precedence: b*A + ((c*A) @ A)); tall inputs are
//     transposed on the way in and out. Then update = bf16(O * scale), p = fma(-lr, update,
//     p * (1 - lr wd)).
// Upstream conventions (reference/optim/muon.cpp; spec B4): momentum Keller Jordan
//   (buf.lerp_(g, 1 - mu); nesterov g.lerp_(buf, mu)) or Moonlight (buf = mu buf + g; nesterov
//   g + mu buf); coefficients: simple (3.4445, -4.7750, 2.0315), EO quintic (5 tuples cycled),
//   deepseekv4 (simple x 8 then (2, -1.5, 0.5)); scale: shape_scaling sqrt(max(1, M/K)),
//   spectral extra sqrt(max(M, K)), unit_rms_norm sqrt(M/K).
// The bf16 GEMMs make Muon tolerance-based (cuBLAS picks the algorithm and accumulation order);
// cuBLAS is run-to-run deterministic on one GPU, so repeated runs are bitwise identical.
// cuBLAS is opened at the first Muon launch (dlopen of libcublas.so.<CUBLAS_VER_MAJOR>, then the
// toolkit's lib64 as a fallback): assay starts, and every other kernel runs, where it is missing;
// a Muon launch there fails with the loader's message.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::bf2f;
using dev::f2bf;
using dev::rbf;

namespace {

__global__ void muon_momentum_kernel(int64_t M, int64_t K, int tall, int keller, int nesterov, float mu, float omu,
                                     const float* g, const float* buf_in, float* buf_out, uint16_t* X) {
  const int64_t n = M * K;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gi = g[i];
    float b, u;
    if (keller) {
      b = dev::torch_lerp(buf_in[i], gi, omu);        // momentum.lerp_(grad, 1 - beta)
      u = nesterov ? dev::torch_lerp(gi, b, mu) : b;  // grad.lerp_(momentum, beta)
    } else {
      b = __fadd_rn(__fmul_rn(buf_in[i], mu), gi);    // buf.mul_(mu).add_(g)
      u = nesterov ? __fmaf_rn(mu, b, gi) : b;        // g.add(buf, alpha=mu)
    }
    buf_out[i] = b;
    const int64_t r = i / K, c = i % K;
    X[tall ? c * M + r : i] = f2bf(u);  // G.bfloat16(), transposed when tall
  }
}

// X = bf16(X / bf16(bf16(sqrt(sumsq)) + eps))
__global__ void muon_normalize_kernel(uint16_t* X, int64_t n, const float* sumsq, float eps) {
  const float nrm = rbf(__fsqrt_rn(sumsq[0]));
  const float d = rbf(__fadd_rn(nrm, eps));
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    X[i] = f2bf(__fdiv_rn(bf2f(X[i]), d));
}

// out = bf16(coef * x)
__global__ void bf16_scale_kernel(uint16_t* out, const uint16_t* x, float coef, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = f2bf(__fmul_rn(coef, bf2f(x[i])));
}
// out = bf16(bf16(coef * x) + y)   (out may alias x)
__global__ void bf16_axpy_kernel(uint16_t* out, const uint16_t* x, const uint16_t* y, float coef, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = f2bf(__fadd_rn(rbf(__fmul_rn(coef, bf2f(x[i]))), bf2f(y[i])));
}

__global__ void muon_final_kernel(int64_t M, int64_t K, int tall, const uint16_t* X, float scale, float dm, float nlr,
                                  const float* p_in, float* p_out, float* update_out) {
  const int64_t n = M * K;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / K, c = i % K;
    const float o = rbf(__fmul_rn(bf2f(X[tall ? c * M + r : i]), scale));  // update *= scale (bf16 tensor)
    if (update_out) update_out[i] = o;
    p_out[i] = __fmaf_rn(nlr, o, __fmul_rn(p_in[i], dm));  // p.mul_(1 - lr wd); p.add_(update, alpha=-lr)
  }
}

void ns_coeffs(int set, int i, double& a, double& b, double& c) {
  static const double q[5][3] = {{4.0848, -6.8946, 2.9270},
                                 {3.9505, -6.3029, 2.6377},
                                 {3.7418, -5.5913, 2.3037},
                                 {2.8769, -3.1427, 1.2046},
                                 {2.8366, -3.0525, 1.2012}};
  if (set == 1) {
    a = q[i % 5][0], b = q[i % 5][1], c = q[i % 5][2];
  } else if (set == 2 && i >= 8) {
    a = 2.0, b = -1.5, c = 0.5;
  } else {
    a = 3.4445, b = -4.7750, c = 2.0315;
  }
}

double scale_factor(int mode, int64_t rows, int64_t cols, double extra) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  if (mode == 1) return extra * std::sqrt(std::max(r, c));
  if (mode == 2) return std::sqrt(r / c);
  return std::sqrt(std::max(1.0, r / c));
}

const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cublas error";
  }
}

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // the exported C entry point (the header adds a C++ overload taking a cudaDataType compute type)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  std::string error;  // non-empty: cuBLAS is unusable, and why
};
const CublasApi& cublas_api() {
  static const CublasApi api = [] {
    CublasApi r;
    const std::string so = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string why = lib ? "" : std::string(dlerror());
#ifdef ASSAY_CUDA_LIBRARY_DIR
    if (!lib) lib = dlopen((std::string(ASSAY_CUDA_LIBRARY_DIR) + "/" + so).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (!lib) {
      r.error = "cannot load " + so + " (cuBLAS, for Muon's Newton-Schulz GEMMs): " + why;
      return r;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && r.error.empty()) r.error = so + " lacks " + name;
    };
    sym(r.create, "cublasCreate_v2");
    sym(r.destroy, "cublasDestroy_v2");
    sym(r.set_stream, "cublasSetStream_v2");
    sym(r.gemm_ex, "cublasGemmEx");
    return r;
  }();
  return api;
}

// Row-major Y[R1 x C2] = P[R1 x J] * Q[J x C2] (bf16 in / out, fp32 accumulation). In cuBLAS's
// column-major terms Y^T = Q^T P^T, and a row-major buffer is its transpose column-major:
// gemm(op_q, op_p, m = C2, n = R1, k = J, A = Q, B = P). transQ: Q's buffer holds Q^T (row-major
// [C2 x J]), i.e. Q = (buffer)^T.
cublasStatus_t gemm_rm(cublasHandle_t h, int64_t R1, int64_t C2, int64_t J, const uint16_t* P, const uint16_t* Q,
                       bool transQ, uint16_t* Y) {
  const float one = 1.0f, zero = 0.0f;
  return cublas_api().gemm_ex(h, transQ ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(C2), static_cast<int>(R1),
                      static_cast<int>(J), &one, Q, CUDA_R_16BF, static_cast<int>(transQ ? J : C2), P, CUDA_R_16BF,
                      static_cast<int>(J), &zero, Y, CUDA_R_16BF, static_cast<int>(C2), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads), 4096)); }

}  // namespace

std::string muon_step(const MuonConfig& c, int64_t M, int64_t K, const float* g, const float* p_in,
                      const float* buf_in, float* p_out, float* buf_out, float* update_out, cudaStream_t stream) {
  if (M <= 0 || K <= 0) return "";
  if (M > (1 << 20) || K > (1 << 20)) return "muon: dimensions above 2^20 are not supported by this launcher";
  const bool tall = M > K;
  const int64_t R = tall ? K : M, C = tall ? M : K;
  const int64_t n = M * K;
  auto al = [](size_t b) { return (b + 255) & ~static_cast<size_t>(255); };
  const size_t xb = al(static_cast<size_t>(R * C) * 2), ab = al(static_cast<size_t>(R * R) * 2);
  const size_t nchunks = static_cast<size_t>((n + dev::kChunk - 1) / dev::kChunk);
  const size_t bytes = 2 * xb + 3 * ab + al(nchunks * sizeof(float)) + al(sizeof(float));
  char* base = nullptr;
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&base), bytes, stream); e != cudaSuccess)
    return std::string("muon: cudaMallocAsync: ") + cudaGetErrorString(e);
  // Zero the work matrices once. Every element is overwritten before it is read (the GEMMs run
  // with beta = 0), but compute-sanitizer initcheck does not see cuBLAS's Hopper GEMMs store
  // their outputs (measured on H100: exactly the R*R + 2 R*R + R*C reads of A, (cA)A and BX per
  // step were reported uninitialized, with correct results), so without this memset initcheck
  // reports false positives.
  if (cudaError_t e = cudaMemsetAsync(base, 0, bytes, stream); e != cudaSuccess) {
    cudaFreeAsync(base, stream);
    return std::string("muon: cudaMemsetAsync: ") + cudaGetErrorString(e);
  }
  uint16_t* X = reinterpret_cast<uint16_t*>(base);
  uint16_t* BX = reinterpret_cast<uint16_t*>(base + xb);
  uint16_t* A = reinterpret_cast<uint16_t*>(base + 2 * xb);
  uint16_t* T1 = reinterpret_cast<uint16_t*>(base + 2 * xb + ab);  // c*A, then B
  uint16_t* T2 = reinterpret_cast<uint16_t*>(base + 2 * xb + 2 * ab);  // (c*A) @ A
  float* partial = reinterpret_cast<float*>(base + 2 * xb + 3 * ab);
  float* sumsq = reinterpret_cast<float*>(base + 2 * xb + 3 * ab + al(nchunks * sizeof(float)));

  std::string err;
  auto cuda_ok = [&](const char* what) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess && err.empty()) err = std::string("muon: ") + what + ": " + cudaGetErrorString(e);
    return err.empty();
  };
  cublasHandle_t h = nullptr;
  auto blas_ok = [&](cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS && err.empty()) err = std::string("muon: ") + what + ": " + cublas_name(s);
    return err.empty();
  };

  const float mu = static_cast<float>(c.momentum), omu = static_cast<float>(1.0 - c.momentum);
  muon_momentum_kernel<<<blocks_for(n), kThreads, 0, stream>>>(M, K, tall, c.momentum_kind == 0, c.nesterov, mu, omu,
                                                               g, buf_in, buf_out, X);
  if (cuda_ok("momentum")) {
    Segments one;
    one.count = 1;
    one.offset[0] = 0;
    one.size[0] = n;
    const cudaError_t e = seg_sumsq(make_chunks(one), X, StoreType::bf16, partial, sumsq, stream);
    if (e != cudaSuccess) err = std::string("muon: norm: ") + cudaGetErrorString(e);
  }
  if (err.empty()) {
    muon_normalize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(X, n, sumsq, static_cast<float>(c.norm_eps));
    cuda_ok("normalize");
  }
  const CublasApi& blas = cublas_api();
  if (err.empty() && !blas.error.empty()) err = "muon: " + blas.error;
  if (err.empty() && blas_ok(blas.create(&h), "cublasCreate") && blas_ok(blas.set_stream(h, stream), "cublasSetStream")) {
    for (int i = 0; i < c.ns_steps && err.empty(); ++i) {
      double a, b, cc;
      ns_coeffs(c.coeffs, i, a, b, cc);
      const float af = static_cast<float>(a), bf = static_cast<float>(b), cf = static_cast<float>(cc);
      if (!blas_ok(gemm_rm(h, R, R, C, X, X, true, A), "gemm A = X X^T")) break;  // Q = X^T: its buffer is X
      bf16_scale_kernel<<<blocks_for(R * R), kThreads, 0, stream>>>(T1, A, cf, R * R);
      if (!cuda_ok("c*A")) break;
      if (!blas_ok(gemm_rm(h, R, R, R, T1, A, false, T2), "gemm (c A) A")) break;
      bf16_axpy_kernel<<<blocks_for(R * R), kThreads, 0, stream>>>(T1, A, T2, bf, R * R);  // B = b A + (c A) A
      if (!cuda_ok("B")) break;
      if (!blas_ok(gemm_rm(h, R, C, R, T1, X, false, BX), "gemm B X")) break;
      bf16_axpy_kernel<<<blocks_for(R * C), kThreads, 0, stream>>>(X, X, BX, af, R * C);  // X = a X + B X
      cuda_ok("X");
    }
  }
  if (err.empty()) {
    const float sc = static_cast<float>(scale_factor(c.scale, M, K, c.extra_scale));
    const float dm = static_cast<float>(1.0 - c.lr * c.weight_decay), nlr = static_cast<float>(-c.lr);
    muon_final_kernel<<<blocks_for(n), kThreads, 0, stream>>>(M, K, tall, X, sc, dm, nlr, p_in, p_out, update_out);
    cuda_ok("update");
  }
  if (h) blas_ok(blas.destroy(h), "cublasDestroy");
  if (cudaError_t e = cudaFreeAsync(base, stream); e != cudaSuccess && err.empty())
    err = std::string("muon: cudaFreeAsync: ") + cudaGetErrorString(e);
  return err;
}

}  // namespace assay::kernels::optim
