#include "reference/core/tensor.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace assay {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<int64_t> Tensor::unravel(int64_t flat) const {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = shape[k] ? flat % shape[k] : 0;
    flat = shape[k] ? flat / shape[k] : 0;
  }
  return idx;
}

std::string Tensor::index_str(int64_t flat) const {
  auto idx = unravel(flat);
  std::string r = "[";
  for (size_t k = 0; k < idx.size(); ++k) {
    std::string ax = k < axes.size() ? axes[k] : fmt::format("d{}", k);
    for (auto& c : ax) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r += fmt::format("{}{}={}", k ? ", " : "", ax, idx[k]);
  }
  return r + "]";
}

double agreement_rel(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  if (b.empty()) return 0.0;
  double ss = 0;
  for (double v : b)
    if (std::isfinite(v)) ss += v * v;
  const double rms = std::sqrt(ss / static_cast<double>(b.size()));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    if (!std::isfinite(x) || !std::isfinite(y)) {
      const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
      if (!same) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = std::fabs(x - y);
    if (d == 0) continue;
    const double den = std::max(std::fabs(y), rms);
    worst = std::max(worst, den > 0 ? d / den : std::numeric_limits<double>::infinity());
  }
  return worst;
}

}  // namespace assay
