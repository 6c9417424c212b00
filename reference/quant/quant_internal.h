// Internal to reference/quant: helpers of the kernel form (quant.cpp: codecs and NVFP4;
// quant_mx_fp8.cpp: MX and FP8; quant_torchao.cpp) that more than one of its sources needs. No
// tensors of their own: fp32 scalars, E2M1 codes and their allowed-code masks (quant.h), and
// row-major [rows, cols] fp32 matrices.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/quant/quant.h"

namespace assay::quant::detail {

constexpr float kFltMax = std::numeric_limits<float>::max();

// fmaxf semantics of CUDA reductions: NaN operands are dropped.
inline float fmax_drop_nan(float a, float b) { return std::fmax(a, b); }

inline uint16_t zero_codes_mask() { return static_cast<uint16_t>(bit(0) | bit(8)); }

// Allowed mask for one E2M1 code: itself, plus the other zero when it is a zero.
inline uint16_t e2m1_allowed(uint8_t code) {
  if ((code & 7) == 0) return zero_codes_mask();
  return static_cast<uint16_t>(bit(code));
}

inline uint8_t e2m1_ties_away(float y) {
  // Mutant: round half away from zero on the E2M1 grid (midpoints go up in magnitude).
  if (std::isnan(y)) return 7;
  double a = std::fabs(static_cast<double>(y));
  static constexpr double mids[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  uint8_t idx = 0;
  while (idx < 7 && a >= mids[idx]) ++idx;
  return static_cast<uint8_t>(idx | (std::signbit(y) ? 8 : 0));
}

inline uint8_t encode_e2m1_cfg(float y, Mutant m) {
  if (m == Mutant::e2m1_ties_away) return e2m1_ties_away(y);
  return e2m1_rn(y);
}

// torch.amax of |v| as the torchao recipes reduce: a NaN operand propagates.
inline float torch_amax_abs(float acc, float v) {
  if (std::isnan(acc) || std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
  return std::max(acc, std::fabs(v));
}

// [M, N] -> [N, M] (the columnwise operand of a rowwise quantizer).
inline std::vector<float> transpose(const std::vector<float>& x, int64_t M, int64_t N) {
  std::vector<float> t(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) t[n * M + m] = x[m * N + n];
  return t;
}

// Calls f(r, b, c0, c1) for every block b of V consecutive columns [c0, c1) of every row r of a
// [rows, cols] matrix, row by row, blocks in order (a row's last block may be shorter).
template <class F>
void for_each_block(int64_t rows, int64_t cols, int64_t V, F&& f) {
  const int64_t nb = (cols + V - 1) / V;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * V;
      f(r, b, c0, std::min(cols, c0 + V));
    }
}

}  // namespace assay::quant::detail
