// Benchmark of the optimizer kernels (kernels/optim/optim_kernels.h) -> build/bin/bench_optim.
// Not a test: random inputs, one JSON line per measurement, bandwidth as a fraction of the
// measured device-to-device copy bandwidth (kernels/bench/bench_util.h). Correctness is the
// gate's job (`assay verify --op optim`).
//
// Measurements (N = 2^26 elements by default; argv[1] overrides log2 N):
//   adamw_fused_fp32      p, g, m, v fp32, in place: 4 reads + 3 writes = 28 B/element
//   adamw_foreach_fp32    same traffic, torch foreach arithmetic
//   adamw_fused_master    g bf16, fp32 master / m / v, bf16 param copy: reads 2+4+4+4, writes 4+4+4+2 = 28 B
//   sgd_momentum_fp32     g, p, buf: 3 reads + 2 writes = 20 B/element
//   lion_fp32             g, p, m: 3 reads + 2 writes = 20 B/element
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/bench/bench_util.h"
#include "kernels/optim/optim_kernels.h"

namespace {

using namespace assay::kernels::optim;
using assay::bench::check;

// Deterministic pseudo-random fill: |x| ~ scale * [0.5, 1.5), sign random unless positive.
__global__ void fill_f32(float* x, int64_t n, uint32_t seed, float scale, int positive) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    const float u = static_cast<float>(h & 0xFFFFFF) / 16777216.0f;
    float v = scale * (0.5f + u);
    if (!positive && (h >> 31)) v = -v;
    x[i] = v;
  }
}
__global__ void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = static_cast<uint16_t>(__float_as_uint(x[i]) >> 16);
}

}  // namespace

int main(int argc, char** argv) {
  const int lg = argc > 1 ? std::atoi(argv[1]) : 26;
  const int64_t n = int64_t{1} << lg;
  cudaStream_t s;
  check(cudaStreamCreate(&s), "stream");
  const double copy_gbps = assay::bench::d2d_copy_gbps(static_cast<size_t>(n) * 4 * 2, s);

  float *g, *p, *m, *v;
  uint16_t *gb, *pb;
  check(cudaMalloc(&g, n * 4), "malloc");
  check(cudaMalloc(&p, n * 4), "malloc");
  check(cudaMalloc(&m, n * 4), "malloc");
  check(cudaMalloc(&v, n * 4), "malloc");
  check(cudaMalloc(&gb, n * 2), "malloc");
  check(cudaMalloc(&pb, n * 2), "malloc");
  fill_f32<<<1024, 256, 0, s>>>(g, n, 1u, 1e-2f, 0);
  fill_f32<<<1024, 256, 0, s>>>(p, n, 2u, 1e-1f, 0);
  fill_f32<<<1024, 256, 0, s>>>(m, n, 3u, 1e-3f, 0);
  fill_f32<<<1024, 256, 0, s>>>(v, n, 4u, 1e-6f, 1);
  to_bf16<<<1024, 256, 0, s>>>(g, gb, n);
  check(cudaStreamSynchronize(s), "init");

  AdamConfig c;  // AdamW defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 1e-2
  int64_t t = 10;
  auto adam = [&](AdamFlavor f, StoreType gt, const void* gp, uint16_t* pbf) {
    return [=, &t](cudaStream_t st) {
      AdamTensors x;
      x.g = gp;
      x.p_in = x.p_out = p;
      x.m_in = x.m_out = m;
      x.v_in = x.v_out = v;
      x.p_bf16_out = pbf;
      check(adam_step(f, c, t, StoreType::f32, gt, x, n, st), "adam_step");
    };
  };
  const double b28 = 28.0 * static_cast<double>(n), b20 = 20.0 * static_cast<double>(n);
  assay::bench::report_bandwidth("adamw_fused_fp32", assay::bench::time_ms(adam(AdamFlavor::torch_fused, StoreType::f32, g, nullptr), s),
                                 b28, copy_gbps);
  assay::bench::report_bandwidth("adamw_foreach_fp32",
                                 assay::bench::time_ms(adam(AdamFlavor::torch_foreach, StoreType::f32, g, nullptr), s), b28,
                                 copy_gbps);
  assay::bench::report_bandwidth("adamw_fused_master_bf16",
                                 assay::bench::time_ms(adam(AdamFlavor::torch_fused, StoreType::bf16, gb, pb), s), b28,
                                 copy_gbps);
  SgdConfig sc;
  sc.momentum = 0.9;
  sc.dampening = 0.1;
  sc.weight_decay = 0.01;
  assay::bench::report_bandwidth(
      "sgd_momentum_fp32",
      assay::bench::time_ms([&](cudaStream_t st) { check(sgd_step(sc, false, g, p, m, p, m, n, st), "sgd"); }, s), b20,
      copy_gbps);
  LionConfig lc;
  lc.weight_decay = 0.1;
  assay::bench::report_bandwidth(
      "lion_fp32", assay::bench::time_ms([&](cudaStream_t st) { check(lion_step(lc, g, p, m, p, m, n, st), "lion"); }, s),
      b20, copy_gbps);
  check(cudaStreamSynchronize(s), "sync");
  cudaFree(g);
  cudaFree(p);
  cudaFree(m);
  cudaFree(v);
  cudaFree(gb);
  cudaFree(pb);
  cudaStreamDestroy(s);
  return 0;
}
