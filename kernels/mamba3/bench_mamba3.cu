// Benchmark of the Mamba-3 SISO forward (mamba3_siso_chunked, mamba3.h) on the issue's production
// shape, random inputs: one JSON line per shape (B, T, H, P, N, S, Q, ms, GB/s of the tensors read
// and written). Not a test; correctness is the gate's job (`assay verify`). Meant to run beside
// upstream's Triton `mamba3_siso_combined` on the same shapes and GPU (no driver script yet).
//   Q, K [B, T, 1, N], V, Z [B, T, H, P], Trap [B, H, T], Angles [B, T, H, S] bf16; ADT, DT [B, H, T],
//   Q_bias, K_bias [H, N], D [H] fp32 -> out [B, T, H, P] bf16, final_angle [B, H, S], final_ssm
//   [B, H, P, N], final_k [B, H, N] fp32, final_v [B, H, P] bf16 (no chunk_states).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bench/bench_util.h"
#include "kernels/mamba3/mamba3.h"

namespace {

using assay::bench::check;
using assay::bench::upload;
using namespace assay::kernels::mamba3;

struct Shape {
  int B, T, H, P, N, Q;
};

void bench(const Shape& s, int iters) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int S = s.N / 2;
  const size_t qk = static_cast<size_t>(s.B) * s.T * s.N, vt = static_cast<size_t>(s.B) * s.T * s.H * s.P,
               bht = static_cast<size_t>(s.B) * s.H * s.T, ang = static_cast<size_t>(s.B) * s.T * s.H * S;
  auto bf = [&](unsigned char* o) { *reinterpret_cast<__nv_bfloat16*>(o) = __float2bfloat16(u(rng)); };
  auto f32 = [&](float lo, float hi) {
    return [&rng, lo, hi](unsigned char* o) { *reinterpret_cast<float*>(o) = std::uniform_real_distribution<float>(lo, hi)(rng); };
  };
  Params p;
  p.B = s.B, p.T = s.T, p.H = s.H, p.G = 1, p.N = s.N, p.P = s.P, p.R = 1, p.S = S, p.NS = s.B, p.L = s.Q;
  p.mimo = false, p.half_split = false;
  const Ten none{};
  auto T16 = [](const void* d) { return Ten{d, Elt::bf16}; };
  auto T32 = [](const void* d) { return Ten{d, Elt::f32}; };
  p.q = T16(upload(qk, 2, bf)), p.k = T16(upload(qk, 2, bf)), p.v = T16(upload(vt, 2, bf)), p.z = T16(upload(vt, 2, bf));
  p.trap = T16(upload(bht, 2, bf)), p.angles = T16(upload(ang, 2, bf));
  p.dt = T32(upload(bht, 4, f32(0.005f, 0.5f))), p.adt = T32(upload(bht, 4, f32(-0.5f, -0.001f)));
  p.q_bias = T32(upload(static_cast<size_t>(s.H) * s.N, 4, f32(0.5f, 1.5f)));
  p.k_bias = T32(upload(static_cast<size_t>(s.H) * s.N, 4, f32(0.5f, 1.5f)));
  p.d = T32(upload(s.H, 4, f32(-1.f, 1.f)));
  p.psi = p.zeta = p.phi = p.norm_w = p.angle_state = p.ssm_state = p.k_state = p.v_state = p.chunk_states = none;
  void *out, *fa, *fs, *fk, *fv;
  const size_t bh = static_cast<size_t>(s.B) * s.H;
  check(cudaMalloc(&out, vt * 2), "malloc");
  check(cudaMalloc(&fa, bh * S * 4), "malloc");
  check(cudaMalloc(&fs, bh * s.P * s.N * 4), "malloc");
  check(cudaMalloc(&fk, bh * s.N * 4), "malloc");
  check(cudaMalloc(&fv, bh * s.P * 2), "malloc");
  p.out = T16(out), p.final_angle = T32(fa), p.final_ssm = T32(fs), p.final_k = T32(fk), p.final_v = T16(fv);
  cudaStream_t st;
  check(cudaStreamCreate(&st), "stream");
  check(mamba3_fwd(p, st), "mamba3_fwd");
  check(cudaStreamSynchronize(st), "mamba3_fwd");
  const double ms = assay::bench::time_ms([&](cudaStream_t t) { mamba3_fwd(p, t); }, st, iters, 3);
  const double bytes = 2.0 * (2.0 * qk + 3.0 * vt + bht + ang) + 4.0 * 2.0 * bht + 4.0 * bh * s.P * s.N;
  std::printf("{\"bench\": \"mamba3\", \"kernel\": \"mamba3_siso_chunked\", \"B\": %d, \"T\": %d, \"H\": %d, \"P\": %d, "
              "\"N\": %d, \"S\": %d, \"Q\": %d, \"ms\": %.5f, \"gbps\": %.1f, \"device\": \"%s\"}\n",
              s.B, s.T, s.H, s.P, s.N, S, s.Q, ms, bytes / (ms * 1e6), assay::bench::device_name().c_str());
  std::fflush(stdout);
  for (const Ten* t : {&p.q, &p.k, &p.v, &p.z, &p.trap, &p.angles, &p.dt, &p.adt, &p.q_bias, &p.k_bias, &p.d})
    cudaFree(const_cast<void*>(t->p));
  for (void* ptr : {out, fa, fs, fk, fv}) cudaFree(ptr);
  cudaStreamDestroy(st);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
  // The issue's shape (upstream mamba3_siso_combined's default chunk 64).
  for (const Shape& s : {Shape{2, 4096, 32, 64, 128, 64}}) bench(s, iters);
  return 0;
}
