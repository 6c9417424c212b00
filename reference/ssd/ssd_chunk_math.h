// Private to reference/ssd/: the chunk arithmetic that the chunked forward (ssd.cpp) and the
// chunked backward (ssd_backward_chunked.cpp) share, so both read the same decays.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace assay::ssd::detail {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using MMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

// Within one chunk of a_l = Delta_l * A (l < Qc): seg(l, s) = sum_{k=s+1..l} a_k for s <= l (0
// above the diagonal), summed from l downwards (no cancellation), and acum_l = the same sum down
// to k = 0, i.e. sum_{k<=l} a_k.
inline void segment_sums(const std::vector<double>& a, RowMat& seg, std::vector<double>& acum) {
  const auto Qc = static_cast<int64_t>(a.size());
  seg = RowMat::Zero(Qc, Qc);
  acum.assign(a.size(), 0.0);
  for (int64_t l = 0; l < Qc; ++l) {
    double acc = 0;
    for (int64_t s = l; s >= 0; --s) {
      seg(l, s) = acc;
      acc += a[static_cast<size_t>(s)];
    }
    acum[static_cast<size_t>(l)] = acc;
  }
}

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

}  // namespace assay::ssd::detail
