// Fresh output buffers for the parallel oracle forms (reference/ssd, reference/gated_delta).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace assay {

// n zeros in a std::vector whose pages all threads fault in first (MADV_POPULATE_WRITE on 2 MiB
// slices; a hint, ignored where unsupported), then zero-filled as usual. First-touching hundreds
// of MB of fresh pages from one thread is otherwise the serial part of the chunked forms.
inline std::vector<double> zeros_prefaulted(size_t n) {
  std::vector<double> v;
  v.reserve(n);
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  constexpr uintptr_t kPage = 4096, kSlice = uintptr_t{2} << 20;
  const auto base = reinterpret_cast<uintptr_t>(v.data());
  const uintptr_t lo = (base + kPage - 1) & ~(kPage - 1), hi = (base + n * sizeof(double)) & ~(kPage - 1);
  if (hi > lo + 4 * kSlice) {
    const auto slices = static_cast<int64_t>((hi - lo + kSlice - 1) / kSlice);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < slices; ++s) {
      const uintptr_t a = lo + static_cast<uintptr_t>(s) * kSlice;
      madvise(reinterpret_cast<void*>(a), std::min(kSlice, hi - a), MADV_POPULATE_WRITE);
    }
  }
#endif
  v.resize(n);
  return v;
}

}  // namespace assay
