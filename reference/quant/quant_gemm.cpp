// The 128x4 scale-factor swizzle and the block-scaled GEMM of the kernel form (see quant.h): the
// scaled operands from NVFP4 / MX / FP8 quantizations, fp64 products with a per-element bound.
#include "reference/quant/quant.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/core/check.h"
#include "reference/quant/quant_internal.h"

namespace assay::quant {

using namespace detail;

// ------------------------------------------------------------------------------------------------
// Swizzle
// ------------------------------------------------------------------------------------------------
int64_t swizzle_offset(int64_t r, int64_t c, int64_t cols_padded) {
  return ((r / 128) * (cols_padded / 4) + (c / 4)) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

std::vector<uint8_t> swizzle_scales(const std::vector<uint8_t>& compact, int64_t rows, int64_t cols,
                                    uint8_t pad) {
  ASSAY_CHECK(static_cast<int64_t>(compact.size()) == rows * cols, "swizzle size");
  const int64_t R = (rows + 127) / 128 * 128, C = (cols + 3) / 4 * 4;
  std::vector<uint8_t> out(static_cast<size_t>(R * C), pad);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[swizzle_offset(r, c, C)] = compact[r * cols + c];
  return out;
}

std::vector<uint8_t> unswizzle_scales(const std::vector<uint8_t>& sw, int64_t rows, int64_t cols) {
  const int64_t R = (rows + 127) / 128 * 128, C = (cols + 3) / 4 * 4;
  ASSAY_CHECK(static_cast<int64_t>(sw.size()) == R * C, "unswizzle size");
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = sw[swizzle_offset(r, c, C)];
  return out;
}

// ------------------------------------------------------------------------------------------------
// GEMM
// ------------------------------------------------------------------------------------------------
ScaledOperand operand_from_nvfp4(const Nvfp4Dir& d) {
  ScaledOperand o;
  o.rows = d.rows;
  o.k = d.cols;
  o.v = 16;
  o.elem.resize(d.codes.size());
  for (size_t i = 0; i < d.codes.size(); ++i) o.elem[i] = e2m1_value(d.codes[i]);
  o.scale.resize(d.scales.size());
  for (size_t i = 0; i < d.scales.size(); ++i) o.scale[i] = decode(DType::e4m3, d.scales[i]);
  return o;
}

ScaledOperand operand_from_mx(const MxDir& d, DType elem) {
  ScaledOperand o;
  o.rows = d.rows;
  o.k = d.cols;
  o.v = 32;
  o.elem.resize(d.codes.size());
  for (size_t i = 0; i < d.codes.size(); ++i)
    o.elem[i] = elem == DType::e2m1 ? e2m1_value(d.codes[i]) : decode(elem, d.codes[i]);
  o.scale.resize(d.scales.size());
  for (size_t i = 0; i < d.scales.size(); ++i)
    o.scale[i] = d.scales[i] == 0xFF ? std::nan("") : std::ldexp(1.0, static_cast<int>(d.scales[i]) - 127);
  return o;
}

ScaledOperand operand_from_fp8(const Fp8Result& r, DType fp8) {
  ScaledOperand o;
  o.rows = r.rows;
  o.k = r.cols;
  o.v = static_cast<int>(r.group_cols);
  o.elem.resize(r.codes.size());
  for (size_t i = 0; i < r.codes.size(); ++i) o.elem[i] = decode(fp8, r.codes[i]);
  const int64_t sc = r.scale_cols;
  o.scale.resize(static_cast<size_t>(r.rows * sc));
  for (int64_t i = 0; i < r.rows; ++i)
    for (int64_t j = 0; j < sc; ++j) o.scale[i * sc + j] = r.scale_inv[r.group_of(i, j * o.v)];
  return o;
}

GemmResult block_scaled_gemm(const ScaledOperand& a, const ScaledOperand& b, double alpha, double beta,
                             const std::vector<double>* c) {
  ASSAY_INPUT_CHECK(a.k == b.k && a.v == b.v, "gemm: K / V mismatch ({} vs {}, {} vs {})", a.k, b.k,
                    a.v, b.v);
  const int64_t M = a.rows, N = b.rows, K = a.k, kb = (K + a.v - 1) / a.v;
  ASSAY_INPUT_CHECK(!c || static_cast<int64_t>(c->size()) == M * N, "gemm: C shape");
  GemmResult g;
  g.m = M;
  g.n = N;
  g.d.assign(static_cast<size_t>(M * N), 0.0);
  g.bound.assign(static_cast<size_t>(M * N), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = a.elem[m * K + k] * a.scale[m * kb + k / a.v];  // exact
        const double y = b.elem[n * K + k] * b.scale[n * kb + k / b.v];  // exact
        acc += x * y;
        mag += std::fabs(x * y);
      }
      g.d[m * N + n] = alpha * acc + (c ? beta * (*c)[m * N + n] : 0.0);
      g.bound[m * N + n] = std::fabs(alpha) * mag;
    }
  return g;
}

double gemm_fp32_error_bound(int64_t k, double bound, double d, DType out) {
  const double u = std::ldexp(1.0, -24);
  const double gk = static_cast<double>(k) * u / (1.0 - static_cast<double>(k) * u);
  double uo = u;
  if (out == DType::bf16) uo = std::ldexp(1.0, -8);
  if (out == DType::f16) uo = std::ldexp(1.0, -11);
  if (out == DType::f64) uo = 0;
  return gk * bound + std::fabs(d) * uo;
}

}  // namespace assay::quant
