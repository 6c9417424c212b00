// Benchmark of ssd_chunked_mma (ssd_fwd.h) on production shapes, random inputs: one JSON line per
// shape (B, T, H, P, N, G, Q, ms, GB/s of the tensors read and written). Not a test; correctness is
// the gate's job (`assay verify`). scripts/bench_ssd runs it beside mamba_ssm's Triton
// `mamba_chunk_scan_combined` on the same shapes and GPU.
//   x, z [B, T, H, P] bf16; dt [B, T, H], A [H], D [H], dt_bias [H] fp32; B, C [B, T, G, N] bf16
//   -> out [B, T, H, P] bf16, final_states [B, H, P, N] fp32.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/bench/bench_util.h"
#include "kernels/ssd/ssd_fwd.h"

namespace {

using assay::bench::check;
using assay::bench::upload;
using namespace assay::kernels::ssd;

struct Shape {
  int B, T, H, P, N, G, Q;
};

void bench(const Shape& s, int iters) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t xt = static_cast<size_t>(s.B) * s.T * s.H * s.P, bt = static_cast<size_t>(s.B) * s.T * s.G * s.N,
               dtn = static_cast<size_t>(s.B) * s.T * s.H;
  auto bf = [&](unsigned char* o) { *reinterpret_cast<__nv_bfloat16*>(o) = __float2bfloat16(u(rng)); };
  auto f32 = [&](float lo, float hi) {
    return [&rng, lo, hi](unsigned char* o) { *reinterpret_cast<float*>(o) = std::uniform_real_distribution<float>(lo, hi)(rng); };
  };
  SsdParams p;
  p.B = s.B, p.T = s.T, p.H = s.H, p.P = s.P, p.N = s.N, p.G = s.G, p.Q = s.Q, p.nchunks = (s.T + s.Q - 1) / s.Q;
  p.bf16 = true;
  p.x = upload(xt, 2, bf), p.z = upload(xt, 2, bf), p.Bm = upload(bt, 2, bf), p.Cm = upload(bt, 2, bf);
  p.dt = static_cast<const float*>(upload(dtn, 4, f32(-4.f, -1.f)));
  p.A = static_cast<const float*>(upload(s.H, 4, f32(-8.f, -1.f)));
  p.D = static_cast<const float*>(upload(s.H, 4, f32(0.5f, 1.5f)));
  p.dt_bias = static_cast<const float*>(upload(s.H, 4, f32(-1.f, 1.f)));
  p.softplus = true, p.dt_min = 0.f, p.dt_max = INFINITY;
  const size_t cs = static_cast<size_t>(s.B) * p.nchunks * s.H * s.P * s.N;
  void *out, *fin, *chs, *delta, *acum, *states;
  check(cudaMalloc(&out, xt * 2), "malloc");
  check(cudaMalloc(&fin, static_cast<size_t>(s.B) * s.H * s.P * s.N * 4), "malloc");
  check(cudaMalloc(&chs, cs * 2), "malloc");
  check(cudaMalloc(&delta, dtn * 4), "malloc");
  check(cudaMalloc(&acum, static_cast<size_t>(s.B) * s.H * p.nchunks * s.Q * 4), "malloc");
  check(cudaMalloc(&states, cs * 4), "malloc");
  p.out = out, p.final_states = static_cast<float*>(fin), p.chunk_states = chs;
  p.delta = static_cast<float*>(delta), p.acum = static_cast<float*>(acum), p.states = static_cast<float*>(states);
  cudaStream_t st;
  check(cudaStreamCreate(&st), "stream");
  check(ssd_fwd(p, st), "ssd_fwd");
  check(cudaStreamSynchronize(st), "ssd_fwd");
  const double ms = assay::bench::time_ms([&](cudaStream_t t) { ssd_fwd(p, t); }, st, iters, 3);
  const double bytes = 2.0 * (3.0 * xt + 2.0 * bt) + 4.0 * dtn + 4.0 * s.B * s.H * s.P * s.N;
  std::printf("{\"bench\": \"ssd\", \"kernel\": \"ssd_chunked_mma\", \"B\": %d, \"T\": %d, \"H\": %d, \"P\": %d, \"N\": %d, "
              "\"G\": %d, \"Q\": %d, \"ms\": %.5f, \"gbps\": %.1f, \"device\": \"%s\"}\n",
              s.B, s.T, s.H, s.P, s.N, s.G, s.Q, ms, bytes / (ms * 1e6), assay::bench::device_name().c_str());
  std::fflush(stdout);
  for (const void* ptr : {p.x, p.z, p.Bm, p.Cm, static_cast<const void*>(p.dt), static_cast<const void*>(p.A),
                          static_cast<const void*>(p.D), static_cast<const void*>(p.dt_bias)})
    cudaFree(const_cast<void*>(ptr));
  for (void* ptr : {out, fin, chs, delta, acum, states}) cudaFree(ptr);
  cudaStreamDestroy(st);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
  // The issue's shape at the upstream default chunk (256) and at 64 and 128; then the L2-like T = 8192, H = 64.
  for (const Shape& s : {Shape{2, 4096, 32, 64, 128, 1, 256}, Shape{2, 4096, 32, 64, 128, 1, 128},
                         Shape{2, 4096, 32, 64, 128, 1, 64}, Shape{1, 8192, 64, 64, 128, 1, 256}})
    bench(s, iters);
  return 0;
}
