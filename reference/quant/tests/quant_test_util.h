// Helpers of the quant oracle tests (test_quant*.cpp): a deterministic generator, bf16-valued test
// matrices, hand-derived test vectors, and the comparison of two NVFP4 directions (codes, scales,
// amax, packed bytes; quant.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "tests/common.h"
#include "reference/core/dtype.h"
#include "reference/quant/quant.h"

namespace quant_test {

using namespace assay;
using namespace assay::quant;

// splitmix64: deterministic, portable.
struct Rng : assay_test::SplitMix64 {
  explicit Rng(uint64_t seed) : SplitMix64{seed} {}
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normalish() {  // Irwin-Hall(4), centred, unit variance
    double s4 = 0;
    for (int i = 0; i < 4; ++i) s4 += uniform();
    return (s4 - 2.0) * std::sqrt(3.0);
  }
};

inline float to_bf16(double v) { return static_cast<float>(round_to(DType::bf16, v)); }

// bf16-valued matrix with a few outliers and some exact zeros / tiny blocks.
inline std::vector<float> bf16_matrix(int64_t M, int64_t N, uint64_t seed, double scale = 1.0) {
  Rng g(seed);
  std::vector<float> x(static_cast<size_t>(M * N));
  for (auto& v : x) {
    double u = g.uniform();
    double s = scale * g.normalish();
    if (u < 0.01) s *= 64;            // outliers
    else if (u < 0.02) s = 0;         // zeros
    else if (u < 0.03) s *= 1e-3;     // small values
    v = to_bf16(s);
  }
  return x;
}

inline float f32_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline void require_same_dir(const Nvfp4Dir& a, const Nvfp4Dir& b, const char* what) {
  INFO(what);
  REQUIRE(a.rows == b.rows);
  REQUIRE(a.cols == b.cols);
  uint32_t fa, fb;
  std::memcpy(&fa, &a.amax, 4);
  std::memcpy(&fb, &b.amax, 4);
  CHECK(fa == fb);
  auto ms = compare_codes("scales", a.scales, nullptr, b.scales, a.rows, a.scale_cols(), 1, 1, DType::e4m3);
  CHECK_FALSE(ms.has_value());
  if (ms) WARN(ms->message);
  auto mc = compare_codes("codes", a.codes, nullptr, b.codes, a.rows, a.cols, 1, 16);
  CHECK_FALSE(mc.has_value());
  if (mc) WARN(mc->message);
  CHECK(a.packed == b.packed);
}

// Both forms of a quantizer on x [M, N]: {kernel form, quant::ref's tensor form}.
inline auto both_forms(const std::vector<float>& x, int64_t M, int64_t N, const Nvfp4Config& cfg) {
  return std::pair{nvfp4_quantize(x, M, N, cfg), ref::nvfp4_quantize(x, M, N, cfg)};
}
inline auto both_forms(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg) {
  return std::pair{mx_quantize(x, M, N, cfg), ref::mx_quantize(x, M, N, cfg)};
}
inline auto both_forms(const std::vector<float>& x, int64_t M, int64_t N, const Fp8Config& cfg) {
  return std::pair{fp8_quantize(x, M, N, cfg), ref::fp8_quantize(x, M, N, cfg)};
}

inline MxConfig mx_config(DType elem, MxScaleRule rule, bool columnwise = false) {
  MxConfig c;
  c.elem = elem;
  c.rule = rule;
  c.columnwise = columnwise;
  return c;
}

// A [1, n] row of `fill` with the given (index, value) entries: a hand-derived test vector.
inline std::vector<float> row_of(int64_t n, std::initializer_list<std::pair<int64_t, float>> at, float fill = 0.0f) {
  std::vector<float> x(static_cast<size_t>(n), fill);
  for (const auto& [i, v] : at) x[static_cast<size_t>(i)] = v;
  return x;
}

// CHECK(codes[i] == want) for every (i, want) entry.
template <class V>
void check_at(const V& codes, std::initializer_list<std::pair<int64_t, int64_t>> want) {
  for (const auto& [i, w] : want) {
    INFO("index " << i);
    CHECK(static_cast<int64_t>(codes[static_cast<size_t>(i)]) == w);
  }
}

}  // namespace quant_test
