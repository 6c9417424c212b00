// Benchmark of the gated delta rule kernels (gated_delta.h: gated_delta_chunked, gated_delta_recurrent)
// on a production prefill shape, random inputs: one JSON line per kernel. Not a test; correctness is
// the gate's job (`assay verify`). scripts/bench_gated_delta runs it beside fla's Triton
// chunk_gated_delta_rule and fused_recurrent_gated_delta_rule on the same shape and GPU.
//   q, k [B, T, H, K] bf16 (l2-normalised in the kernel), v [B, T, HV, V] bf16, g [B, T, HV] fp32
//   (log space, < 0), beta [B, T, HV] bf16 in (0, 1) -> o [B, T, HV, V] bf16, final_state
//   [B, HV, K, V] fp32; chunk 64, scale K^-1/2, no initial state.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bench/bench_util.h"
#include "kernels/gated_delta/gated_delta.h"

namespace {

using assay::bench::check;
namespace gd = assay::kernels::gated_delta;

template <typename T, typename F>
void* upload(size_t n, F gen) {
  std::vector<T> h(n);
  for (auto& x : h) x = gen();
  void* d = nullptr;
  check(cudaMalloc(&d, n * sizeof(T)), "malloc");
  check(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

void bench(const char* kernel, cudaError_t (*f)(const gd::Params&, cudaStream_t, gd::Mutation), int64_t B, int64_t T,
           int64_t H, int64_t HV, int64_t K, int64_t V, int iters) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f), u01(0.05f, 0.95f), ug(-0.5f, -0.01f);
  gd::Params p;
  p.B = B, p.T = T, p.H = H, p.HV = HV, p.K = K, p.V = V, p.Nseq = B, p.chunk = 64;
  p.scale = 1.f / std::sqrt(static_cast<float>(K));
  p.gate = gd::Gate::log, p.beta_mode = gd::Beta::given, p.l2norm = true;
  p.q = upload<__nv_bfloat16>(B * T * H * K, [&] { return __float2bfloat16(u(rng)); });
  p.k = upload<__nv_bfloat16>(B * T * H * K, [&] { return __float2bfloat16(u(rng)); });
  p.v = upload<__nv_bfloat16>(B * T * HV * V, [&] { return __float2bfloat16(u(rng)); });
  p.g = upload<float>(B * T * HV, [&] { return ug(rng); });
  p.beta = upload<__nv_bfloat16>(B * T * HV, [&] { return __float2bfloat16(u01(rng)); });
  p.g_t = gd::Elt::f32, p.beta_t = gd::Elt::bf16, p.o_t = gd::Elt::bf16, p.ht_t = gd::Elt::f32;
  void *o, *ht;
  check(cudaMalloc(&o, B * T * HV * V * 2), "malloc");
  check(cudaMalloc(&ht, B * HV * K * V * 4), "malloc");
  p.o = o, p.ht = ht;
  cudaStream_t st;
  check(cudaStreamCreate(&st), "stream");
  check(f(p, st, gd::Mutation::none), kernel);
  check(cudaStreamSynchronize(st), kernel);
  const double ms = assay::bench::time_ms([&](cudaStream_t t) { f(p, t, gd::Mutation::none); }, st, iters, 3);
  std::printf("{\"bench\": \"gated_delta\", \"kernel\": \"%s\", \"B\": %lld, \"T\": %lld, \"H\": %lld, \"HV\": %lld, "
              "\"K\": %lld, \"V\": %lld, \"chunk\": 64, \"ms\": %.5f, \"device\": \"%s\"}\n",
              kernel, static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
              static_cast<long long>(HV), static_cast<long long>(K), static_cast<long long>(V), ms,
              assay::bench::device_name().c_str());
  std::fflush(stdout);
  for (const void* ptr : {p.q, p.k, p.v, p.g, p.beta}) cudaFree(const_cast<void*>(ptr));
  cudaFree(o);
  cudaFree(ht);
  cudaStreamDestroy(st);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
  bench("gated_delta_chunked", gd::gated_delta_chunked, 2, 4096, 16, 32, 128, 128, iters);
  bench("gated_delta_recurrent", gd::gated_delta_recurrent, 2, 4096, 16, 32, 128, 128, iters);
  return 0;
}
