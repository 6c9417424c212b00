// Kernel form of the MX and FP8 quantization oracles (see quant.h), as quant.cpp: fp32
// arithmetic is plain C++ float arithmetic (SSE2, -ffp-contract=off), one IEEE rounding per
// operation.
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
// MX
// ------------------------------------------------------------------------------------------------
int mx_emax(DType elem) {
  switch (elem) {
    case DType::e4m3: return 8;
    case DType::e5m2: return 15;
    case DType::e2m1: return 2;
    default: break;
  }
  throw InputError("mx: element dtype must be e4m3, e5m2 or e2m1");
}

namespace {

MxDir mx_dir(const std::vector<float>& hp, int64_t rows, int64_t cols, const MxConfig& cfg) {
  MxDir d;
  d.rows = rows;
  d.cols = cols;
  const int64_t sc = d.scale_cols();
  d.scales.assign(static_cast<size_t>(rows * sc), 0);
  d.codes.assign(static_cast<size_t>(rows * cols), 0);
  d.allowed.assign(static_cast<size_t>(rows * cols), 0);
  d.alt.assign(static_cast<size_t>(rows * cols), 0);
  d.scale_alt.assign(static_cast<size_t>(rows * sc), 0);
  const DType el = cfg.elem;
  const bool fp4 = el == DType::e2m1;
  const int emax = mx_emax(el);
  const float max_rcp = static_cast<float>(1.0 / info(el).max_finite);  // (float)(1.0/max_norm)
  const bool rceil = cfg.rule == MxScaleRule::rceil && cfg.mutant != Mutant::mx_floor_for_rceil;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < sc; ++b) {
      const int64_t c0 = b * 32, c1 = std::min(cols, c0 + 32);
      uint8_t e;
      if (rceil) {
        float a = 0.0f;
        for (int64_t c = c0; c < c1; ++c) {
          const float v = hp[r * cols + c];
          a = fmax_drop_nan(a, cfg.mutant == Mutant::mx_nan_as_inf && std::isnan(v) ? INFINITY : std::fabs(v));
        }
        e = ue8m0_from_f32_rceil(a * max_rcp);
      } else {
        float a = 0.0f;
        for (int64_t c = c0; c < c1; ++c) a = torch_amax_abs(a, hp[r * cols + c]);
        e = ue8m0_floor_exponent(a, emax);
      }
      d.scales[r * sc + b] = e;
      d.scale_alt[r * sc + b] = e;
      bool has_inf = false, has_nan = false;
      for (int64_t c = c0; c < c1; ++c) {
        has_inf = has_inf || std::isinf(hp[r * cols + c]);
        has_nan = has_nan || std::isnan(hp[r * cols + c]);
      }
      // A NaN inside an RCEIL block (spec A4: unspecified): the fmaxf-style amax above drops it
      // (TE); torchao's to_mx reduces with torch.amax, which propagates it: scale byte 0xFF and
      // the whole block NaN. Both are allowed: the scale's alternative is 0xFF; a block whose scale a
      // candidate stores as NaN decodes to NaN whatever its codes, so the judge accepts any code
      // there (Output::scaled_by).
      const bool nan_alt = rceil && has_nan && e != 0xFF;
      if (nan_alt) d.scale_alt[r * sc + b] = 0xFF;
      for (int64_t c = c0; c < c1; ++c) {
        const float x = hp[r * cols + c];
        uint8_t code;
        uint16_t allow;
        if (e == 0xFF) {
          code = fp4 ? 7 : static_cast<uint8_t>(encode(el, std::nan(""), Overflow::satfinite));
          allow = fp4 ? 0xFFFF : 1;
        } else {
          const double y = std::ldexp(static_cast<double>(x), 127 - static_cast<int>(e));  // exact
          code = fp4 ? encode_e2m1_cfg(static_cast<float>(y), cfg.mutant)
                     : static_cast<uint8_t>(encode(el, y, Overflow::satfinite));
          allow = fp4 ? e2m1_allowed(code) : 0;
          if (fp4 && std::isnan(x)) allow = 0xFFFF;
          if (!fp4 && std::isnan(x)) allow = 1;
        }
        uint8_t alt = code;
        if (rceil && e == 0 && !std::isnan(x)) {
          // TE exp2f_rcp(0) = 1: the element is encoded unscaled (|x| <= 448 * 2^-127 -> +-0).
          alt = fp4 ? e2m1_rn(x) : static_cast<uint8_t>(encode_f32(el, x, Overflow::satfinite));
          if (fp4) allow = static_cast<uint16_t>(allow | e2m1_allowed(alt));
        }
        if (rceil && e == 0xFE && has_inf) {
          // Inf amax -> 0xFE; older TE exp2f_rcp(254) = 0.0f: finite x -> +-0, Inf -> NaN.
          if (std::isinf(x)) {
            alt = fp4 ? code : static_cast<uint8_t>(encode(el, std::nan(""), Overflow::satfinite));
            if (fp4) allow = 0xFFFF;
          } else if (!std::isnan(x)) {
            alt = static_cast<uint8_t>(std::signbit(x) ? (fp4 ? 8 : 0x80) : 0);
            if (fp4) allow = static_cast<uint16_t>(allow | e2m1_allowed(alt));
          }
        }
        d.codes[r * cols + c] = code;
        d.allowed[r * cols + c] = allow;
        d.alt[r * cols + c] = alt;
      }
    }
  if (fp4) {
    d.packed = pack_e2m1(d.codes, rows, cols);
    if (cfg.mutant == Mutant::nibble_swap)
      for (auto& byte : d.packed) byte = static_cast<uint8_t>((byte >> 4) | (byte << 4));
  }
  return d;
}

}  // namespace

MxResult mx_quantize(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg) {
  ASSAY_INPUT_CHECK(M >= 1 && N >= 1 && static_cast<int64_t>(x.size()) == M * N, "mx: bad shape");
  (void)mx_emax(cfg.elem);
  MxResult r;
  if (cfg.rowwise) r.row = mx_dir(x, M, N, cfg);
  if (cfg.columnwise) r.col = mx_dir(transpose(x, M, N), N, M, cfg);
  return r;
}

std::vector<double> mx_dequantize(const MxDir& d, DType elem) {
  std::vector<double> out(static_cast<size_t>(d.rows * d.cols));
  const int64_t sc = d.scale_cols();
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t c = 0; c < d.cols; ++c) {
      const uint8_t e = d.scales[r * sc + c / 32];
      const double p = elem == DType::e2m1 ? e2m1_value(d.codes[r * d.cols + c])
                                           : decode(elem, d.codes[r * d.cols + c]);
      out[r * d.cols + c] = e == 0xFF ? std::nan("") : std::ldexp(p, static_cast<int>(e) - 127);
    }
  return out;
}

// ------------------------------------------------------------------------------------------------
// FP8
// ------------------------------------------------------------------------------------------------
int64_t Fp8Result::group_of(int64_t r, int64_t c) const {
  return (r / group_rows) * scale_cols + (c / group_cols);
}

namespace {

float te_scale_from_amax(float amax, float max_fp8, bool pow2, float eps) {
  if (amax < eps) amax = eps;
  float scale = 1.0f;
  if (std::isinf(amax) || amax == 0.0f || std::isnan(amax)) return scale;
  scale = max_fp8 / amax;
  if (std::isinf(scale)) scale = kFltMax;
  if (std::isnan(scale)) scale = 1.0f;
  if (pow2) {
    uint32_t bits;
    std::memcpy(&bits, &scale, 4);
    bits &= 0xFF800000u;
    std::memcpy(&scale, &bits, 4);
  }
  return scale;
}

float ceil_to_ue8m0(float x) {
  uint32_t bits;
  float a = std::fabs(x);
  std::memcpy(&bits, &a, 4);
  int32_t e = static_cast<int32_t>((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
  e = std::clamp(e, 1, 254);
  uint32_t ob = static_cast<uint32_t>(e) << 23;
  float out;
  std::memcpy(&out, &ob, 4);
  return out;
}

struct Fp8Grid {
  int64_t gr, gc, nr, nc;
};
Fp8Grid fp8_grid(int64_t M, int64_t N, const Fp8Config& cfg) {
  switch (cfg.gran) {
    case Fp8Granularity::per_tensor: return {M, N, 1, 1};
    case Fp8Granularity::per_channel: return {1, N, M, 1};
    case Fp8Granularity::block_1x128: return {1, cfg.block, M, (N + cfg.block - 1) / cfg.block};
    case Fp8Granularity::block_128x128:
      return {cfg.block, cfg.block, (M + cfg.block - 1) / cfg.block, (N + cfg.block - 1) / cfg.block};
  }
  return {M, N, 1, 1};
}

}  // namespace

Fp8Result fp8_quantize(const std::vector<float>& x, int64_t M, int64_t N, const Fp8Config& cfg) {
  ASSAY_INPUT_CHECK(M >= 1 && N >= 1 && static_cast<int64_t>(x.size()) == M * N, "fp8: bad shape");
  ASSAY_INPUT_CHECK(cfg.fp8 == DType::e4m3 || cfg.fp8 == DType::e5m2, "fp8: dtype must be e4m3/e5m2");
  ASSAY_INPUT_CHECK(cfg.block >= 1, "fp8: block must be >= 1");
  const Fp8Grid g = fp8_grid(M, N, cfg);
  Fp8Result r;
  r.rows = M;
  r.cols = N;
  r.scale_rows = g.nr;
  r.scale_cols = g.nc;
  r.group_rows = g.gr;
  r.group_cols = g.gc;
  const int64_t ng = g.nr * g.nc;
  r.amax.assign(static_cast<size_t>(ng), 0.0f);
  r.scale.assign(static_cast<size_t>(ng), 1.0f);
  r.scale_inv.assign(static_cast<size_t>(ng), 1.0f);
  r.codes.assign(static_cast<size_t>(M * N), 0);
  const float maxv = static_cast<float>(info(cfg.fp8).max_finite);
  for (int64_t gi = 0; gi < g.nr; ++gi)
    for (int64_t gj = 0; gj < g.nc; ++gj) {
      const int64_t r0 = gi * g.gr, r1 = std::min(M, r0 + g.gr);
      const int64_t c0 = gj * g.gc, c1 = std::min(N, c0 + g.gc);
      float a = 0.0f;
      float scale, sinv;
      if (cfg.recipe == Fp8ScaleRecipe::te_current) {
        for (int64_t i = r0; i < r1; ++i)
          for (int64_t j = c0; j < c1; ++j) a = fmax_drop_nan(a, std::fabs(x[i * N + j]));
        if (cfg.amax_override && cfg.gran == Fp8Granularity::per_tensor) a = *cfg.amax_override;
        scale = te_scale_from_amax(a, maxv, cfg.pow2_scale, cfg.epsilon);
        sinv = 1.0f / scale;
      } else {
        for (int64_t i = r0; i < r1; ++i)
          for (int64_t j = c0; j < c1; ++j) a = torch_amax_abs(a, x[i * N + j]);
        if (cfg.amax_override && cfg.gran == Fp8Granularity::per_tensor) a = *cfg.amax_override;
        a = std::isnan(a) ? a : std::max(a, 1e-4f);  // torch.clamp(min=1e-4)
        float sf = cfg.torch_cuda_scalar_div ? a * (1.0f / 448.0f) : a / 448.0f;
        if (cfg.pow2_scale) sf = ceil_to_ue8m0(sf);
        sinv = sf;
        scale = 1.0f / sf;
      }
      const int64_t gidx = gi * g.nc + gj;
      r.amax[gidx] = a;
      r.scale[gidx] = scale;
      r.scale_inv[gidx] = sinv;
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = c0; j < c1; ++j) {
          const float y = x[i * N + j] * scale;
          r.codes[i * N + j] = static_cast<uint8_t>(encode_f32(cfg.fp8, y, cfg.overflow));
        }
    }
  return r;
}

std::vector<double> fp8_dequantize(const Fp8Result& r, DType fp8) {
  std::vector<double> out(static_cast<size_t>(r.rows * r.cols));
  for (int64_t i = 0; i < r.rows; ++i)
    for (int64_t j = 0; j < r.cols; ++j)
      out[i * r.cols + j] =
          decode(fp8, r.codes[i * r.cols + j]) * static_cast<double>(r.scale_inv[r.group_of(i, j)]);
  return out;
}

FakeQuantResult fp8_fake_quant(const std::vector<float>& x, const std::vector<float>& dy, int64_t M,
                               int64_t N, const Fp8Config& cfg, bool clipped_ste) {
  ASSAY_INPUT_CHECK(cfg.gran == Fp8Granularity::per_tensor || cfg.gran == Fp8Granularity::per_channel,
                    "fake quant: per-tensor or per-channel only");
  ASSAY_INPUT_CHECK(static_cast<int64_t>(dy.size()) == M * N, "fake quant: dy shape");
  FakeQuantResult f;
  f.q = fp8_quantize(x, M, N, cfg);
  f.y.resize(static_cast<size_t>(M * N));
  f.y_exact.resize(static_cast<size_t>(M * N));
  f.dx.resize(static_cast<size_t>(M * N));
  const double maxv = info(cfg.fp8).max_finite;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const int64_t k = i * N + j, g = f.q.group_of(i, j);
      const double dec = decode(cfg.fp8, f.q.codes[k]);
      f.y[k] = static_cast<float>(dec) * f.q.scale_inv[g];
      f.y_exact[k] = dec * static_cast<double>(f.q.scale_inv[g]);
      const float xs = x[k] * f.q.scale[g];
      const bool inside = std::fabs(static_cast<double>(xs)) <= maxv;
      f.dx[k] = (!clipped_ste || inside) ? dy[k] : 0.0f;
    }
  return f;
}

}  // namespace assay::quant
