// bench_attention: times the attention forward kernels on random bf16 inputs (not a test; the
// gate checks correctness). One JSON line per measurement on stdout:
//   {"bench": "attention", "kernel": ..., "shape": ..., "B", "Hq", "Hkv", "Sq", "Sk", "D",
//    "causal", "ms", "tflops", "gbps", "device"}
// scripts/bench_attention runs it together with PyTorch SDPA (flash backend) on the same shapes.
//
// Tensors: q bf16 [B, Sq, Hq, D], k / v bf16 [B, Sk, Hkv, D], O bf16 [B, Sq, Hq, D],
// LSE fp32 [B, Hq, Sq]; values uniform in [-1, 1), scale 1/sqrt(D).
// FLOPs: 4 B Hq Sq Sk D (QK^T and PV), halved for causal prefill with Sq = Sk (FlashAttention's
// benchmark convention). Bytes (decode): q + K + V + O read / written once.
//
// attention_fwd_sm90 (Hopper TMA / wgmma) on the three prefill shapes,
// each preceded by an "attention_check" line: its max |O - O_v2| and |LSE - LSE_v2| there.
// Shapes: prefill B = 2, H = 16, S = 4096, D = 128, causal and not (attention_fwd_v2 when
// kernels/attention/attention_fwd.h exists; attention_v1 only on a small shape), decode Sq = 1,
// Sk = 8192, Hq = 16, Hkv = 2 (GQA 8:1), D = 128, B = 2 and 32 (attention_decode_v3 when present,
// attention_v1 with splits otherwise and as the baseline).
//   bench_attention [--iters N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/attention/attention_params.h"
#include "kernels/attention/attention_v1.h"
#include "kernels/bench/bench_util.h"

#if __has_include("kernels/attention/attention_sm90.h")
#include "kernels/attention/attention_sm90.h"
#define ASSAY_HAVE_ATTENTION_SM90 1
#else
#define ASSAY_HAVE_ATTENTION_SM90 0
#endif

#if __has_include("kernels/attention/attention_fwd.h")
#include "kernels/attention/attention_fwd.h"
#define ASSAY_HAVE_ATTENTION_FWD 1
#else
#define ASSAY_HAVE_ATTENTION_FWD 0
#endif

namespace {

using assay::bench::check;
using namespace assay::kernels::attention;

__global__ void fill_uniform(uint16_t* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32) * 40503u;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    const float u = static_cast<float>(h >> 8) * (1.f / 16777216.f) * 2.f - 1.f;
    x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(u));
  }
}

struct Shape {
  std::string name;
  int B, Hq, Hkv, Sq, Sk, D;
  bool causal;
};

struct Buffers {
  uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
};

Buffers alloc(const Shape& s, cudaStream_t st) {
  Buffers b;
  const int64_t nq = static_cast<int64_t>(s.B) * s.Sq * s.Hq * s.D, nk = static_cast<int64_t>(s.B) * s.Sk * s.Hkv * s.D;
  check(cudaMalloc(&b.q, nq * 2), "malloc q");
  check(cudaMalloc(&b.k, nk * 2), "malloc k");
  check(cudaMalloc(&b.v, nk * 2), "malloc v");
  check(cudaMalloc(&b.o, nq * 2), "malloc o");
  check(cudaMalloc(&b.lse, static_cast<int64_t>(s.B) * s.Hq * s.Sq * 4), "malloc lse");
  fill_uniform<<<1024, 256, 0, st>>>(b.q, nq, 1u);
  fill_uniform<<<1024, 256, 0, st>>>(b.k, nk, 2u);
  fill_uniform<<<1024, 256, 0, st>>>(b.v, nk, 3u);
  check(cudaStreamSynchronize(st), "fill");
  return b;
}
void release(Buffers& b) {
  cudaFree(b.q), cudaFree(b.k), cudaFree(b.v), cudaFree(b.o), cudaFree(b.lse);
  b = Buffers{};
}

AttnParams params_of(const Shape& s, const Buffers& b) {
  AttnParams p;
  p.q = b.q, p.k = b.k, p.v = b.v, p.o = b.o, p.lse = b.lse;
  p.fp16 = false;
  p.B = s.B, p.Hq = s.Hq, p.Hkv = s.Hkv, p.D = s.D, p.Dv = s.D;
  p.Sq = s.Sq, p.Sk = s.Sk, p.total_q = s.B * s.Sq;
  p.max_seqlen_q = s.Sq, p.max_seqlen_k = s.Sk;
  p.scale = 1.f / std::sqrt(static_cast<float>(s.D));
  p.causal = s.causal;
  p.tile_n = 64, p.num_splits = 1;
  return p;
}

double flops(const Shape& s) {
  double f = 4.0 * s.B * s.Hq * static_cast<double>(s.Sq) * s.Sk * s.D;
  if (s.causal && s.Sq == s.Sk) f *= 0.5;
  return f;
}
double bytes(const Shape& s) {
  return 2.0 * (2.0 * s.B * s.Sq * s.Hq * s.D + 2.0 * s.B * static_cast<double>(s.Sk) * s.Hkv * s.D);
}

void report(const char* kernel, const Shape& s, double ms) {
  std::printf(
      "{\"bench\": \"attention\", \"kernel\": \"%s\", \"shape\": \"%s\", \"B\": %d, \"Hq\": %d, \"Hkv\": %d, \"Sq\": %d, "
      "\"Sk\": %d, \"D\": %d, \"causal\": %s, \"ms\": %.5f, \"tflops\": %.2f, \"gbps\": %.1f, \"device\": \"%s\"}\n",
      kernel, s.name.c_str(), s.B, s.Hq, s.Hkv, s.Sq, s.Sk, s.D, s.causal ? "true" : "false", ms,
      flops(s) / (ms * 1e9), bytes(s) / (ms * 1e6), assay::bench::device_name().c_str());
  std::fflush(stdout);
}

void bench(const char* kernel, const Shape& s, const std::function<cudaError_t(const AttnParams&, cudaStream_t)>& f,
           cudaStream_t st, int iters) {
  Buffers b = alloc(s, st);
  const AttnParams p = params_of(s, b);
  check(f(p, st), kernel);  // one checked launch before timing
  check(cudaStreamSynchronize(st), kernel);
  const double ms = assay::bench::time_ms([&](cudaStream_t t) { f(p, t); }, st, iters, 3);
  report(kernel, s, ms);
  release(b);
}

#if ASSAY_HAVE_ATTENTION_SM90 && ASSAY_HAVE_ATTENTION_FWD
float bf16_to_float(uint16_t x) {
  uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// attention_fwd_sm90: a failed launch is reported as a JSON line with
// "error" and the run goes on. Before timing, its O and LSE are compared with attention_fwd_v2's
// on the same inputs ("max_abs_diff_o_vs_v2", "max_abs_diff_lse_vs_v2"; NaN or a large value
// means the sm90 kernel is wrong: the gate's goldens say by how much).
void bench_sm90(const Shape& s, cudaStream_t st, int iters) {
  Buffers b = alloc(s, st);
  const AttnParams p = params_of(s, b);
  const int64_t k_rows = static_cast<int64_t>(s.B) * s.Sk;
  const auto f = [k_rows](const AttnParams& q, cudaStream_t t) { return attention_fwd_sm90(q, k_rows, t); };
  cudaError_t e = f(p, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  if (e != cudaSuccess) {
    std::printf("{\"bench\": \"attention\", \"kernel\": \"attention_fwd_sm90\", \"shape\": \"%s\", \"error\": \"%s\"}\n",
                s.name.c_str(), cudaGetErrorString(e));
    std::fflush(stdout);
    cudaGetLastError();
    release(b);
    return;
  }
  const int64_t no = static_cast<int64_t>(s.B) * s.Sq * s.Hq * s.D, nl = static_cast<int64_t>(s.B) * s.Hq * s.Sq;
  std::vector<uint16_t> o1(no), o2(no);
  std::vector<float> l1(nl), l2(nl);
  check(cudaMemcpy(o1.data(), b.o, no * 2, cudaMemcpyDeviceToHost), "copy o");
  check(cudaMemcpy(l1.data(), b.lse, nl * 4, cudaMemcpyDeviceToHost), "copy lse");
  check(attention_fwd_v2(p, st), "v2 reference run");
  check(cudaStreamSynchronize(st), "v2 reference run");
  check(cudaMemcpy(o2.data(), b.o, no * 2, cudaMemcpyDeviceToHost), "copy o");
  check(cudaMemcpy(l2.data(), b.lse, nl * 4, cudaMemcpyDeviceToHost), "copy lse");
  double dmax = 0, lmax = 0;
  for (int64_t i = 0; i < no; ++i) {
    const double d = std::fabs(static_cast<double>(bf16_to_float(o1[i])) - bf16_to_float(o2[i]));
    dmax = std::isnan(d) ? INFINITY : std::max(dmax, d);
  }
  for (int64_t i = 0; i < nl; ++i) {
    const double d = std::fabs(static_cast<double>(l1[i]) - l2[i]);
    lmax = std::isnan(d) ? INFINITY : std::max(lmax, d);
  }
  std::printf("{\"bench\": \"attention_check\", \"kernel\": \"attention_fwd_sm90\", \"shape\": \"%s\", "
              "\"max_abs_diff_o_vs_v2\": %.6g, \"max_abs_diff_lse_vs_v2\": %.6g}\n",
              s.name.c_str(), dmax, lmax);
  std::fflush(stdout);
  const double ms = assay::bench::time_ms([&](cudaStream_t t) { f(p, t); }, st, iters, 3);
  report("attention_fwd_sm90", s, ms);
  release(b);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
  }
  cudaStream_t st;
  check(cudaStreamCreate(&st), "stream");

  const Shape pre_c{"prefill_B2_H16_S4096_D128_causal", 2, 16, 16, 4096, 4096, 128, true};
  const Shape pre_n{"prefill_B2_H16_S4096_D128", 2, 16, 16, 4096, 4096, 128, false};
  const Shape pre_small{"prefill_B1_H4_S1024_D128_causal", 1, 4, 4, 1024, 1024, 128, true};
  // Decode: Sq = 1 sees every key (bottom-right causal = no mask); run non-causal so SDPA (top-left
  // causal) computes the same thing.
  const Shape dec2{"decode_B2_Hq16_Hkv2_Sk8192_D128", 2, 16, 2, 1, 8192, 128, false};
  const Shape dec32{"decode_B32_Hq16_Hkv2_Sk8192_D128", 32, 16, 2, 1, 8192, 128, false};

  const auto v1 = [](const AttnParams& p, cudaStream_t s) { return attention_v1(p, s); };
  // v1 on decode: split-KV over 64-key tiles so that the grid fills the GPU.
  const auto v1_split = [](const AttnParams& p0, cudaStream_t s) {
    AttnParams p = p0;
    p.tile_n = 64;
    p.num_splits = 16;
    return attention_v1(p, s);
  };

#if ASSAY_HAVE_ATTENTION_FWD
  const auto v2 = [](const AttnParams& p, cudaStream_t s) { return attention_fwd_v2(p, s); };
  const auto v3 = [](const AttnParams& p, cudaStream_t s) { return attention_decode_v3(p, s, 0); };
  bench("attention_fwd_v2", pre_c, v2, st, iters);
  bench("attention_fwd_v2", pre_n, v2, st, iters);
  bench("attention_fwd_v2", pre_small, v2, st, iters);
#if ASSAY_HAVE_ATTENTION_SM90
  bench_sm90(pre_c, st, iters);
  bench_sm90(pre_n, st, iters);
  bench_sm90(pre_small, st, iters);
#endif
  bench("attention_decode_v3", dec2, v3, st, iters);
  bench("attention_decode_v3", dec32, v3, st, iters);
#endif
  bench("attention_v1", pre_small, v1, st, std::max(3, iters / 4));
  bench("attention_v1", dec2, v1_split, st, iters);
  bench("attention_v1", dec32, v1_split, st, iters);
  cudaStreamDestroy(st);
  return 0;
}
