// GPU test (CTest label gpu; exit 125 without a GPU, never a pass): ssd_chunked_mma past 2^31
// elements, where no golden can go (x alone would be 4.8 GB of inputs). The check needs no oracle:
// batch invariance. The kernel runs once on a batch of 3 rows whose last row's x / out element
// offsets pass 2^31, and once on that last row alone (the same device data, B = 1); its out and
// final_states must be bitwise identical in both runs (the kernel computes each (row, head) with
// the same code in the same order, so any difference is an addressing error).
//   x [3, 98304, 128, 64] bf16 (2.4e9 elements; row 2 spans [1.61e9, 2.42e9)), dt [3, T, H] fp32,
//   A [H] fp32, B, C [3, T, 1, 128] bf16, D [H] fp32, no z -> out like x (bf16), final_states
//   [3, H, 64, 128] fp32; chunk 256.
//   test_ssd_large                      the real kernel: exit 0 iff both runs agree bitwise
//   test_ssd_large --mutant offsets_i32 the 32-bit-offset mutant: exit 0 iff the check rejects it
//                                       (a CUDA error or a difference)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/ssd/ssd_fwd.h"

namespace {

using namespace assay::kernels::ssd;

// Deterministic pseudo-random fill on the device (splitmix64 of the index), value in [lo, hi).
__device__ __forceinline__ float hash01(uint64_t i, uint64_t seed) {
  uint64_t z = i + seed * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}
__global__ void fill_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(lo + (hi - lo) * hash01(i, seed));
}
__global__ void fill_f32(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = lo + (hi - lo) * hash01(i, seed);
}
__global__ void count_diff(const uint16_t* a, const uint16_t* b, int64_t n, unsigned long long* out) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    c += a[i] != b[i];
  if (c) atomicAdd(out, c);
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "test_ssd_large: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Mutation m = Mutation::none;
  if (argc == 3 && !std::strcmp(argv[1], "--mutant") && !std::strcmp(argv[2], "offsets_i32")) {
    m = Mutation::offsets_i32;
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: test_ssd_large [--mutant offsets_i32]\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "SKIPPED: no GPU\n");
    return 125;
  }
  const int B = 3, T = 98304, H = 128, P = 64, N = 128, Q = 256, NC = T / Q;
  const int64_t xt = int64_t(B) * T * H * P, row = int64_t(T) * H * P, bt = int64_t(B) * T * N,
                dtn = int64_t(B) * T * H, pn = int64_t(P) * N, cs = int64_t(B) * NC * H * pn;
  std::printf("x: %lld elements; row 2 spans [%lld, %lld); 2^31 = %lld\n", (long long)xt, (long long)(2 * row),
              (long long)xt, 1ll << 31);
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const size_t need = size_t(xt) * 2 * 2 + size_t(cs) * 6 + size_t(row) * 2 + size_t(bt) * 4 + size_t(dtn) * 8;
  if (free_b < need + (size_t(2) << 30)) {
    std::fprintf(stderr, "SKIPPED: needs %.1f GB of GPU memory, %.1f GB free\n", need / 1e9, free_b / 1e9);
    return 125;
  }
  __nv_bfloat16 *x, *Bm, *Cm, *out, *out1;
  float *dt, *A, *D, *fin, *fin1, *delta, *acum, *states;
  uint16_t* chs;
  bool good = ok(cudaMalloc(&x, xt * 2), "malloc x") && ok(cudaMalloc(&Bm, bt * 2), "malloc") &&
              ok(cudaMalloc(&Cm, bt * 2), "malloc") && ok(cudaMalloc(&out, xt * 2), "malloc out") &&
              ok(cudaMalloc(&out1, row * 2), "malloc") && ok(cudaMalloc(&dt, dtn * 4), "malloc") &&
              ok(cudaMalloc(&A, H * 4), "malloc") && ok(cudaMalloc(&D, H * 4), "malloc") &&
              ok(cudaMalloc(&fin, B * H * pn * 4), "malloc") && ok(cudaMalloc(&fin1, H * pn * 4), "malloc") &&
              ok(cudaMalloc(&delta, dtn * 4), "malloc") && ok(cudaMalloc(&acum, int64_t(B) * H * NC * Q * 4), "malloc") &&
              ok(cudaMalloc(&states, cs * 4), "malloc states") && ok(cudaMalloc(&chs, cs * 2), "malloc");
  if (!good) return 1;
  fill_bf16<<<4096, 256>>>(x, xt, 1, -1.f, 1.f);
  fill_bf16<<<1024, 256>>>(Bm, bt, 2, -1.f, 1.f);
  fill_bf16<<<1024, 256>>>(Cm, bt, 3, -1.f, 1.f);
  fill_f32<<<1024, 256>>>(dt, dtn, 4, -4.f, -1.f);
  fill_f32<<<1, 128>>>(A, H, 5, -8.f, -1.f);
  fill_f32<<<1, 128>>>(D, H, 6, 0.5f, 1.5f);
  if (!ok(cudaDeviceSynchronize(), "fill")) return 1;
  SsdParams p;
  p.B = B, p.T = T, p.H = H, p.P = P, p.N = N, p.G = 1, p.Q = Q, p.nchunks = NC;
  p.x = x, p.Bm = Bm, p.Cm = Cm, p.dt = dt, p.A = A, p.D = D, p.softplus = true, p.dt_min = 0.f, p.dt_max = INFINITY;
  p.out = out, p.final_states = fin, p.chunk_states = chs, p.delta = delta, p.acum = acum, p.states = states;
  // Run 1: all three rows. Run 2: row 2 alone, reading the same device data.
  cudaError_t e1 = ssd_fwd(p, 0, m);
  if (e1 == cudaSuccess) e1 = cudaDeviceSynchronize();
  SsdParams p1 = p;
  p1.B = 1;
  p1.x = x + 2 * row, p1.Bm = Bm + 2 * int64_t(T) * N, p1.Cm = Cm + 2 * int64_t(T) * N, p1.dt = dt + 2 * int64_t(T) * H;
  p1.out = out1, p1.final_states = fin1;
  cudaError_t e2 = e1 == cudaSuccess ? ssd_fwd(p1, 0, m) : e1;
  if (e2 == cudaSuccess) e2 = cudaDeviceSynchronize();
  bool rejected = false;
  if (e1 != cudaSuccess || e2 != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(e1 != cudaSuccess ? e1 : e2));
    rejected = true;
  } else {
    unsigned long long* cnt;
    unsigned long long h[2] = {0, 0};
    if (!ok(cudaMalloc(&cnt, 16), "malloc") || !ok(cudaMemset(cnt, 0, 16), "memset")) return 1;
    count_diff<<<4096, 256>>>(reinterpret_cast<const uint16_t*>(out + 2 * row), reinterpret_cast<const uint16_t*>(out1),
                              row, cnt);
    // final_states as pairs of 16-bit halves: bitwise too.
    count_diff<<<1024, 256>>>(reinterpret_cast<const uint16_t*>(fin + 2 * H * pn), reinterpret_cast<const uint16_t*>(fin1),
                              H * pn * 2, cnt + 1);
    if (!ok(cudaMemcpy(h, cnt, 16, cudaMemcpyDeviceToHost), "copy")) return 1;
    std::printf("row 2 of the batch vs row 2 alone: out %llu of %lld codes differ, final_states %llu of %lld halves differ\n",
                h[0], (long long)row, h[1], (long long)(H * pn * 2));
    rejected = h[0] || h[1];
  }
  if (m == Mutation::none) {
    std::printf(rejected ? "FAIL: the real kernel is not batch invariant past 2^31 elements\n"
                         : "ok: bitwise identical past 2^31 elements\n");
    return rejected ? 1 : 0;
  }
  std::printf(rejected ? "ok: the offsets_i32 mutant is rejected\n" : "FAIL: the offsets_i32 mutant passed\n");
  return rejected ? 0 : 1;
}
