#include "reference/core/tensor.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "reference/core/check.h"

namespace assay {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) {
    if (d < 0) throw InputError(fmt::format("shape {}: negative dimension", shape_str(s)));
    if (__builtin_mul_overflow(n, d, &n))
      throw InputError(fmt::format("shape {}: the element count overflows 64 bits", shape_str(s)));
  }
  return n;
}

namespace {
std::atomic<int64_t> g_memory_limit{0};
int64_t default_memory_limit() {
  if (const char* e = std::getenv("ASSAY_MAX_MEMORY")) {
    char* end = nullptr;
    const long long v = std::strtoll(e, &end, 10);
    if (end && *end == 0 && v > 0) return v;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 : (int64_t{4} << 30);
}
}  // namespace

int64_t memory_limit() {
  int64_t v = g_memory_limit.load();
  if (v == 0) g_memory_limit.store(v = default_memory_limit());
  return v;
}
void set_memory_limit(int64_t bytes) { g_memory_limit.store(bytes > 0 ? bytes : default_memory_limit()); }

void check_memory(int64_t n, int64_t bytes_each, const std::string& what) {
  int64_t bytes = 0;
  if (n < 0 || __builtin_mul_overflow(n, bytes_each, &bytes) || bytes > memory_limit())
    throw InputError(fmt::format("{}: {} elements of {} bytes is above the memory limit of {:.3g} GiB (--max-memory)", what, n,
                                 bytes_each, static_cast<double>(memory_limit()) / (1 << 30)));
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

std::string Output::element_str(int64_t i) const {
  if (!sampled || i < 0 || i >= static_cast<int64_t>(sample_offsets.size())) return expected.index_str(i);
  const Tensor whole{expected.name, full_axes, full_shape, expected.dtype, {}};
  return whole.index_str(sample_offsets[static_cast<size_t>(i)]);
}

}  // namespace assay
