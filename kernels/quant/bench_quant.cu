// Benchmark of the quant kernels (not a test): bf16 [8192, 8192] random input; one JSON line per
// measurement with the bytes moved (bf16 read + codes / scales written; the amax pass reads x once
// more) as a fraction of the measured device-to-device copy bandwidth.
//   nvfp4_*   quant_nvfp4_v1, packed E2M1 + E4M3 scales ("cast": amax given; "amax+cast": the full
//             launch with the global amax reduction)
//   mxfp8_*   quant_mx_v1, E4M3 codes + UE8M0 scales, RCEIL
//   mxfp4_*   quant_mx_v1, packed E2M1 + UE8M0 scales, RCEIL
//   fp8_*     quant_fp8_v1, TE per-tensor (amax + scale + cast); DeepGEMM 1x128 and 128x128 with
//             quant_fp8_v1 and v2, then a v2-vs-v1 bitwise comparison on this tensor
// Usage: bench_quant [M N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/bench/bench_util.h"
#include "kernels/quant/quant_kernels.h"

using namespace assay::kernels::quant;
using assay::bench::check;

namespace {

__global__ void fill_bf16(uint16_t* x, int64_t n, uint32_t seed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
  h ^= h >> 16, h *= 0x85EBCA6Bu, h ^= h >> 13, h *= 0xC2B2AE35u, h ^= h >> 16;
  const float u = (static_cast<float>(h & 0xFFFFFF) / 16777216.0f - 0.5f) * 8.0f;  // [-4, 4)
  x[i] = static_cast<uint16_t>(__float_as_uint(u) >> 16);
}

template <class T>
T* dalloc(size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, n * sizeof(T)), "malloc");
  return static_cast<T*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t M = argc > 2 ? std::atoll(argv[1]) : 8192, N = argc > 2 ? std::atoll(argv[2]) : 8192;
  const double MN = static_cast<double>(M) * static_cast<double>(N);
  cudaStream_t s;
  check(cudaStreamCreate(&s), "stream");
  uint16_t* x = dalloc<uint16_t>(static_cast<size_t>(M * N));
  fill_bf16<<<static_cast<unsigned>((M * N + 255) / 256), 256, 0, s>>>(x, M * N, 12345u);
  check(cudaGetLastError(), "fill");
  const double copy = assay::bench::d2d_copy_gbps(static_cast<size_t>(2 * M * N), s);

  uint8_t* pr = dalloc<uint8_t>(static_cast<size_t>(M * ((N + 1) / 2)));
  uint8_t* pc = dalloc<uint8_t>(static_cast<size_t>(N * ((M + 1) / 2)));
  uint8_t* qr = dalloc<uint8_t>(static_cast<size_t>(M * N));
  uint8_t* qc = dalloc<uint8_t>(static_cast<size_t>(M * N));
  uint8_t* sr = dalloc<uint8_t>(static_cast<size_t>(M * ((N + 15) / 16)));
  uint8_t* sc = dalloc<uint8_t>(static_cast<size_t>(N * ((M + 15) / 16)));
  float* am = dalloc<float>(2);
  float* f = dalloc<float>(static_cast<size_t>(4 * (M * ((N + 127) / 128) + 1)));

  // ---- NVFP4
  Nvfp4Args nv;
  nv.x = x, nv.M = M, nv.N = N;
  nv.packed_row = pr, nv.scale_row = sr, nv.amax_row = am;
  check(quant_nvfp4_v1(nv, s), "nvfp4 amax");  // fills am[0]
  check(cudaStreamSynchronize(s), "sync");
  const double nv_out = MN / 2 + MN / 16;
  nv.compute_amax = false;
  double ms = assay::bench::time_ms([&](cudaStream_t st) { quant_nvfp4_v1(nv, st); }, s);
  assay::bench::report_bandwidth("nvfp4_rowwise_cast", ms, 2 * MN + nv_out, copy);
  nv.packed_col = pc, nv.scale_col = sc, nv.amax_col = am + 1;
  check(cudaMemcpyAsync(am + 1, am, sizeof(float), cudaMemcpyDeviceToDevice, s), "copy amax");
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_nvfp4_v1(nv, st); }, s);
  assay::bench::report_bandwidth("nvfp4_rowwise_colwise_cast", ms, 2 * MN + 2 * nv_out, copy);
  nv.compute_amax = true;
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_nvfp4_v1(nv, st); }, s);
  assay::bench::report_bandwidth("nvfp4_rowwise_colwise_amax+cast", ms, 4 * MN + 2 * nv_out, copy);
  nv.packed_col = nullptr, nv.scale_col = nullptr, nv.amax_col = nullptr;
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_nvfp4_v1(nv, st); }, s);
  assay::bench::report_bandwidth("nvfp4_rowwise_amax+cast", ms, 4 * MN + nv_out, copy);

  // ---- MXFP8 E4M3 (RCEIL) and MXFP4
  MxArgs mx;
  mx.x = x, mx.M = M, mx.N = N, mx.elem = 0, mx.rceil = true;
  mx.q_row = qr, mx.scale_row = sr;
  const double mx8_out = MN + MN / 32;
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_mx_v1(mx, st); }, s);
  assay::bench::report_bandwidth("mxfp8_e4m3_rowwise", ms, 2 * MN + mx8_out, copy);
  mx.q_col = qc, mx.scale_col = sc;
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_mx_v1(mx, st); }, s);
  assay::bench::report_bandwidth("mxfp8_e4m3_rowwise_colwise", ms, 2 * MN + 2 * mx8_out, copy);
  MxArgs m4;
  m4.x = x, m4.M = M, m4.N = N, m4.elem = 2, m4.rceil = true;
  m4.packed_row = pr, m4.scale_row = sr;
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_mx_v1(m4, st); }, s);
  assay::bench::report_bandwidth("mxfp4_rowwise", ms, 2 * MN + MN / 2 + MN / 32, copy);

  // ---- FP8
  Fp8Args f8;
  f8.x = x, f8.M = M, f8.N = N, f8.q = qr;
  f8.amax = f, f8.scale = f + 1, f8.scale_inv = f + 2;
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_fp8_v1(f8, st); }, s);
  assay::bench::report_bandwidth("fp8_tensor_amax+cast", ms, 4 * MN + MN, copy);
  const int64_t g = M * ((N + 127) / 128);
  f8.gran = 2, f8.deepgemm = true;
  f8.amax = f, f8.scale = f + g, f8.scale_inv = f + 2 * g;
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_fp8_v1(f8, st); }, s);
  assay::bench::report_bandwidth("fp8_deepseek_1x128_v1", ms, 2 * MN + MN + 12.0 * static_cast<double>(g), copy);
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_fp8_v2(f8, st); }, s);
  assay::bench::report_bandwidth("fp8_deepseek_1x128_v2", ms, 2 * MN + MN + 12.0 * static_cast<double>(g), copy);
  const int64_t g2 = ((M + 127) / 128) * ((N + 127) / 128);
  f8.gran = 3;
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_fp8_v1(f8, st); }, s);
  assay::bench::report_bandwidth("fp8_deepseek_128x128_v1", ms, 2 * MN + MN + 12.0 * static_cast<double>(g2), copy);
  ms = assay::bench::time_ms([&](cudaStream_t st) { quant_fp8_v2(f8, st); }, s);
  assay::bench::report_bandwidth("fp8_deepseek_128x128_v2", ms, 2 * MN + MN + 12.0 * static_cast<double>(g2), copy);

  // v2 must give v1's bits on this tensor too (the gate checks both against the goldens).
  float* f2 = dalloc<float>(static_cast<size_t>(4 * (M * ((N + 127) / 128) + 1)));
  for (int gran : {2, 3}) {
    const int64_t ng = gran == 2 ? g : g2;
    Fp8Args a1 = f8, a2 = f8;
    a1.gran = a2.gran = gran;
    a1.amax = f, a1.scale = f + ng, a1.scale_inv = f + 2 * ng;
    a2.q = qc, a2.amax = f2, a2.scale = f2 + ng, a2.scale_inv = f2 + 2 * ng;
    check(quant_fp8_v1(a1, s), "fp8 v1");
    check(quant_fp8_v2(a2, s), "fp8 v2");
    check(cudaStreamSynchronize(s), "fp8 sync");
    std::vector<uint8_t> q1(static_cast<size_t>(M * N)), q2(q1.size());
    std::vector<float> s1(static_cast<size_t>(3 * ng)), s2(s1.size());
    check(cudaMemcpy(q1.data(), qr, q1.size(), cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(q2.data(), qc, q2.size(), cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(s1.data(), f, s1.size() * 4, cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(s2.data(), f2, s2.size() * 4, cudaMemcpyDeviceToHost), "copy");
    const bool same = q1 == q2 && std::memcmp(s1.data(), s2.data(), s1.size() * 4) == 0;
    std::printf("{\"bench\": \"fp8_v2_vs_v1_bits\", \"gran\": \"%s\", \"identical\": %s}\n",
                gran == 2 ? "1x128" : "128x128", same ? "true" : "false");
  }

  check(cudaStreamSynchronize(s), "final sync");
  check(cudaGetLastError(), "final");
  std::printf("{\"bench\": \"done\", \"M\": %lld, \"N\": %lld}\n", static_cast<long long>(M), static_cast<long long>(N));
  return 0;
}
