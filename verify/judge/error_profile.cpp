#include "verify/judge/error_profile.h"

#include <algorithm>
#include <cmath>

#include "verify/judge/compare.h"

namespace assay {
namespace {

bool is_seq_axis(const std::string& a) { return a == "T" || a == "S" || a == "Sq" || a == "Sk" || a == "L" || a == "M"; }
bool is_row_axis(const std::string& a) {
  return a == "B" || a == "H" || a == "Hq" || a == "Hkv" || a == "HV" || a == "G";
}
nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

ErrorProfile error_profile(const Output& golden, const Tolerance& tol, const std::vector<double>& actual,
                           int64_t max_seq_points) {
  const Tensor& t = golden.expected;
  ErrorProfile p;
  const size_t nd = t.shape.size();
  int seq = -1;
  std::vector<int> row_dims;
  for (size_t d = 0; d < nd && d < t.axes.size(); ++d) {
    if (seq < 0 && is_seq_axis(t.axes[d])) seq = static_cast<int>(d);
    else if (is_row_axis(t.axes[d])) row_dims.push_back(static_cast<int>(d));
  }
  const int64_t n = t.size();
  p.n = n;
  // Without a sequence axis, the position is the offset over the remaining (non-row) axes, so the
  // heatmap keeps one row per batch/head: e.g. a state [B, HV, K, V] plots K·V per (b, hv).
  std::vector<int> pos_dims;
  if (seq >= 0) pos_dims.push_back(seq);
  else
    for (size_t d = 0; d < nd; ++d)
      if (std::find(row_dims.begin(), row_dims.end(), static_cast<int>(d)) == row_dims.end()) pos_dims.push_back(static_cast<int>(d));
  p.seq_len = 1;
  p.seq_axis.clear();
  for (int d : pos_dims) {
    p.seq_len *= t.shape[static_cast<size_t>(d)];
    p.seq_axis += (p.seq_axis.empty() ? "" : "\u00b7") + (static_cast<size_t>(d) < t.axes.size() ? t.axes[static_cast<size_t>(d)] : "?");
  }
  if (p.seq_axis.empty()) p.seq_axis = "element";
  max_seq_points = std::max<int64_t>(1, max_seq_points);
  p.seq_bin = std::max<int64_t>(1, p.seq_len / max_seq_points + (p.seq_len % max_seq_points != 0));
  p.seq_max_ratio.assign(static_cast<size_t>(std::max<int64_t>(1, (p.seq_len + p.seq_bin - 1) / p.seq_bin)), 0.0);
  int64_t nrows = 1;
  for (size_t j = 0; j < row_dims.size(); ++j) {
    nrows *= t.shape[static_cast<size_t>(row_dims[j])];
    p.row_axes += (j ? "\u00b7" : "") + t.axes[static_cast<size_t>(row_dims[j])];
  }
  p.row_bin = std::max<int64_t>(1, (nrows + ErrorProfile::kMaxRows - 1) / ErrorProfile::kMaxRows);
  p.rows = std::max<int64_t>(1, (nrows + p.row_bin - 1) / p.row_bin);
  p.tile = 1;
  while ((p.seq_len + p.tile - 1) / p.tile > ErrorProfile::kMaxCols) p.tile *= 2;
  p.cols = std::max<int64_t>(1, (p.seq_len + p.tile - 1) / p.tile);
  p.heat.assign(static_cast<size_t>(p.rows * p.cols), 0.0);
  p.hist.assign(24, 0);  // log10 ratio from -6 to +6 in steps of 0.5

  // Strides, to find each element's sequence position and row without unravelling.
  std::vector<int64_t> stride(nd, 1);
  for (size_t d = nd; d-- > 1;) stride[d - 1] = stride[d] * t.shape[d];
  for (int64_t i = 0; i < n; ++i) {
    const double r = check_element(golden, tol, static_cast<size_t>(i), actual[static_cast<size_t>(i)]).ratio;
    int64_t pos = 0;
    for (int d : pos_dims) pos = pos * t.shape[static_cast<size_t>(d)] + (i / stride[static_cast<size_t>(d)]) % t.shape[static_cast<size_t>(d)];
    int64_t row = 0;
    for (int d : row_dims) row = row * t.shape[static_cast<size_t>(d)] + (i / stride[static_cast<size_t>(d)]) % t.shape[static_cast<size_t>(d)];
    auto& s = p.seq_max_ratio[static_cast<size_t>(pos / p.seq_bin)];
    auto& h = p.heat[static_cast<size_t>((row / p.row_bin) * p.cols + pos / p.tile)];
    // NaN ratios do not occur (check_element returns 0, finite or +inf); max keeps +inf.
    s = std::max(s, r);
    h = std::max(h, r);
    if (r > 1) {
      ++p.over;
      if (p.first_bad_pos < 0 || pos < p.first_bad_pos) p.first_bad_pos = pos, p.first_bad_flat = i;
    }
    if (r == 0) ++p.zero;
    else if (std::isinf(r)) ++p.infinite;
    else {
      const double k = std::floor((std::log10(r) - p.hist_lo) / p.hist_step);
      const auto b = static_cast<int64_t>(std::clamp(k, 0.0, static_cast<double>(p.hist.size() - 1)));
      ++p.hist[static_cast<size_t>(b)];
    }
  }
  return p;
}

nlohmann::json to_json(const ErrorProfile& p) {
  nlohmann::json seq = nlohmann::json::array(), heat = nlohmann::json::array();
  for (double x : p.seq_max_ratio) seq.push_back(finite_or_null(x));
  for (double x : p.heat) heat.push_back(finite_or_null(x));
  return {{"note", "ratio = error / allowed (null: infinite, a code, NaN/Inf-position or never-pass mismatch)"},
          {"seq_axis", p.seq_axis}, {"seq_len", p.seq_len}, {"seq_bin", p.seq_bin}, {"seq_max_ratio", seq},
          {"row_axes", p.row_axes}, {"rows", p.rows}, {"row_bin", p.row_bin}, {"cols", p.cols}, {"tile", p.tile},
          {"heat_max_ratio", heat}, {"hist_log10_lo", p.hist_lo}, {"hist_log10_step", p.hist_step}, {"hist", p.hist},
          {"zero", p.zero}, {"infinite", p.infinite}, {"over_1", p.over}, {"n", p.n}};
}

void attach_error_profile(TensorReport& r, const Output& golden, const std::vector<double>& actual) {
  if (r.verdict == Verdict::Passed || actual.size() != golden.expected.data.size()) return;
  r.error_profile = std::make_shared<const ErrorProfile>(error_profile(golden, r.tol, actual));
}

}  // namespace assay
