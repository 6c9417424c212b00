// Shared helpers for the kernel benchmarks (kernels/<op>/bench_<op>.cu -> build/bin/bench_<op>).
// Benchmarks are not tests: they time kernels on random inputs and print one JSON object per
// measurement on stdout; correctness is the gate's job (`assay verify`). Memory-bound kernels are
// reported as a fraction of the measured device-to-device copy bandwidth of the same GPU.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace assay::bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

// Median milliseconds of `iters` launches of f (after `warmup` untimed ones), each timed alone
// with CUDA events on `s`.
inline double time_ms(const std::function<void(cudaStream_t)>& f, cudaStream_t s, int iters = 50, int warmup = 5) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < warmup; ++i) f(s);
  check(cudaStreamSynchronize(s), "warmup");
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(a, s), "record");
    f(s);
    check(cudaEventRecord(b, s), "record");
    check(cudaEventSynchronize(b), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  check(cudaGetLastError(), "launch");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A device buffer of n elements of `elem` bytes, element i written by gen(pointer to its bytes).
template <typename F>
void* upload(size_t n, size_t elem, F gen) {
  std::vector<unsigned char> h(n * elem);
  for (size_t i = 0; i < n; ++i) gen(h.data() + i * elem);
  void* d = nullptr;
  check(cudaMalloc(&d, h.size()), "malloc");
  check(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice), "upload");
  return d;
}

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second) for a copy of
// `bytes` bytes: the practical ceiling a memory-bound kernel is compared with.
inline double d2d_copy_gbps(size_t bytes, cudaStream_t s) {
  void *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, bytes), "malloc");
  check(cudaMalloc(&dst, bytes), "malloc");
  check(cudaMemsetAsync(src, 1, bytes, s), "memset");
  const double ms = time_ms([&](cudaStream_t st) { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st); }, s);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);
}

inline std::string device_name() {
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, dev);
  return p.name;
}

// One JSON line: {"bench": name, "ms": ..., "bytes": ..., "gbps": ..., "copy_gbps": ..., "fraction": ...}
inline void report_bandwidth(const std::string& name, double ms, double bytes, double copy_gbps) {
  const double gbps = bytes / (ms * 1e6);
  std::printf("{\"bench\": \"%s\", \"device\": \"%s\", \"ms\": %.5f, \"bytes\": %.0f, \"gbps\": %.1f, \"copy_gbps\": %.1f, "
              "\"fraction_of_copy\": %.3f}\n",
              name.c_str(), device_name().c_str(), ms, bytes, gbps, copy_gbps, gbps / copy_gbps);
  std::fflush(stdout);
}

}  // namespace assay::bench
