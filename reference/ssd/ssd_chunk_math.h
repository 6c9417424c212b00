// Private to reference/ssd/: the chunk arithmetic that the chunked forward (ssd.cpp) and the
// chunked backward (ssd_backward_chunked.cpp) share, so both read the same decays.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "reference/core/prefault.h"

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

}  // namespace assay::ssd::detail
