#include "reference/core/sample.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "reference/core/check.h"

namespace assay {

std::vector<int64_t> even_tokens(int64_t T, int64_t n) {
  std::vector<int64_t> t;
  if (T <= 0) return t;
  if (n <= 1 && T > 1) n = 2;
  if (T <= n) {
    for (int64_t i = 0; i < T; ++i) t.push_back(i);
    return t;
  }
  for (int64_t k = 0; k < n; ++k) {
    // round(k (T - 1) / (n - 1)) in integers (exact for any T below 2^62 / n).
    const int64_t v = (2 * k * (T - 1) + (n - 1)) / (2 * (n - 1));
    if (t.empty() || v != t.back()) t.push_back(v);
  }
  return t;
}

SampleSpec default_sample(int64_t B, int64_t Hs, int64_t T, int64_t tokens) {
  SampleSpec sp;
  const int64_t bs[3] = {0, B / 2, B - 1}, hs[3] = {0, Hs / 2, Hs - 1};
  for (int k = 0; k < 3; ++k) {
    bool dup = false;
    for (size_t j = 0; j < sp.seqs.size(); ++j) dup |= sp.seqs[j] == bs[k] && sp.heads[j] == hs[k];
    if (!dup) sp.seqs.push_back(bs[k]), sp.heads.push_back(hs[k]);
  }
  sp.head_count = Hs;
  sp.token_count = T;
  sp.tokens = even_tokens(T, tokens);
  return sp;
}

std::vector<int64_t> slice_offsets(const SampleSpec& sp, size_t s, const std::vector<std::string>& axes,
                                   const std::vector<int64_t>& shape, bool sub) {
  ASSAY_CHECK(s < sp.slices(), "sample: slice {} of {}", s, sp.slices());
  ASSAY_CHECK(axes.size() == shape.size(), "sample: {} axes for a rank-{} tensor", axes.size(), shape.size());
  std::vector<std::vector<int64_t>> idx(axes.size());
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t n = shape[k];
    auto& v = idx[k];
    const bool head = std::find(sp.head_axes.begin(), sp.head_axes.end(), axes[k]) != sp.head_axes.end();
    if (axes[k] == sp.batch_axis) {
      v = {sub ? 0 : sp.seqs[s]};
    } else if (head) {
      ASSAY_CHECK(sp.head_count > 0 && (sub || sp.head_count % n == 0),
                  "sample: axis {} has {} heads, which do not divide the {} sampled heads", axes[k], n, sp.head_count);
      v = {sub ? 0 : sp.heads[s] * n / sp.head_count};
    } else if (axes[k] == sp.token_axis && static_cast<int64_t>(sp.tokens.size()) != sp.token_count) {
      ASSAY_CHECK(n == sp.token_count, "sample: token axis {} has extent {}, the sample {}", axes[k], n, sp.token_count);
      v = sp.tokens;
    } else {
      v.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
    }
    for (int64_t i : v) ASSAY_CHECK(i >= 0 && i < n, "sample: index {} on axis {} of extent {}", i, axes[k], n);
  }
  std::vector<int64_t> stride(axes.size(), 1);
  for (size_t k = axes.size(); k-- > 1;) stride[k - 1] = stride[k] * shape[k];
  size_t total = 1;
  for (const auto& v : idx) total *= v.size();
  std::vector<int64_t> out;
  out.reserve(total);
  if (total == 0) return out;
  std::vector<size_t> pos(axes.size(), 0);
  for (;;) {
    int64_t off = 0;
    for (size_t k = 0; k < axes.size(); ++k) off += idx[k][pos[k]] * stride[k];
    out.push_back(off);
    size_t k = axes.size();
    while (k > 0) {
      --k;
      if (++pos[k] < idx[k].size()) break;
      pos[k] = 0;
      if (k == 0) return out;
    }
    if (axes.empty()) return out;
  }
}

std::vector<int64_t> sample_offsets(const SampleSpec& sp, const std::vector<std::string>& axes,
                                    const std::vector<int64_t>& shape) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < sp.slices(); ++s) {
    const auto o = slice_offsets(sp, s, axes, shape, false);
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}

std::string sample_summary(const SampleSpec& sp) {
  std::string s = fmt::format("{} slice{} (seq, head):", sp.slices(), sp.slices() == 1 ? "" : "s");
  for (size_t k = 0; k < sp.slices(); ++k) s += fmt::format(" ({}, {})", sp.seqs[k], sp.heads[k]);
  s += fmt::format("; {} of {} tokens", sp.tokens.size(), sp.token_count);
  return s;
}

}  // namespace assay
