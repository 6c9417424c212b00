// Where a tensor's error lives: the data behind the HTML report's plots and the JSON report's
// `error_profile`, computed with THE element rule (check_element, verify/judge/compare.h), so a plot shows
// exactly the ratios the verdict used.
//
//   ratio_i = |a_i - e_i| / allowed_i   (0 when both are 0; +inf for a code, NaN/Inf-position or
//                                         never-pass mismatch; > 1 <=> element i is a mismatch)
//
// Axes come from the golden output's axis names (docs/DESIGN.md "Axis vocabulary"):
//   - the sequence axis is the first of T, S, Sq, Sk, L, M; without one, the position is the
//     offset over the axes that are not batch/head axes (a state [B, HV, K, V]: "K·V");
//   - rows of the heatmap are the batch and head axes (B, H, Hq, Hkv, HV, G), flattened "B·H";
//   - every other axis (D, P, N, K, V, R, ...) is reduced by max.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/core/tensor.h"
#include "verify/judge/compare.h"
#include "verify/judge/tolerance.h"

namespace assay {

struct ErrorProfile {
  // Max ratio per sequence position; positions are grouped by `seq_bin` (>= 1) so that at most
  // kMaxSeqPoints points remain.
  std::string seq_axis;  // "T", "Sq", ... or the flattened other axes ("K·V"), or "element"
  int64_t seq_len = 0, seq_bin = 1;
  std::vector<double> seq_max_ratio;
  // Heatmap: rows = flattened batch/head index (grouped by row_bin when there are more than
  // kMaxRows), cols = tiles of `tile` sequence positions (a power of two, at most kMaxCols tiles).
  std::string row_axes;  // "B·H", "B", "" (one row)
  int64_t rows = 1, row_bin = 1, cols = 1, tile = 1;
  std::vector<double> heat;  // rows * cols, row-major, max ratio per cell
  // Histogram of log10(ratio): `zero` (ratio 0), bins [hist_lo + k*hist_step, +hist_step) for
  // k < hist.size() (values below the first bin go to the first, above the last to the last),
  // and `infinite` (+inf: code / NaN / never-pass mismatches).
  double hist_lo = -6, hist_step = 0.5;
  std::vector<int64_t> hist;
  int64_t zero = 0, infinite = 0, n = 0, over = 0;  // over: ratio > 1
  // The smallest sequence position holding a mismatch (ratio > 1), exact whatever seq_bin is, and
  // the flat index of the first mismatching element there; -1 when nothing is out of tolerance.
  int64_t first_bad_pos = -1, first_bad_flat = -1;

  static constexpr int64_t kMaxSeqPoints = 512, kMaxRows = 64, kMaxCols = 64;
};

// max_seq_points: how many sequence points to keep (positions are grouped above it); `assay bisect`
// asks for every position.
ErrorProfile error_profile(const Output& golden, const Tolerance& tol, const std::vector<double>& actual,
                           int64_t max_seq_points = ErrorProfile::kMaxSeqPoints);
nlohmann::json to_json(const ErrorProfile& p);
// Sets r.error_profile (under r.tol) when r did not pass; a passing tensor keeps only its margin
// (r.max_ratio), which keeps reports of thousands of passing cases small.
void attach_error_profile(TensorReport& r, const Output& golden, const std::vector<double>& actual);

}  // namespace assay
