// torchao's to_mx, written independently of the oracle (quant.cpp mx_quantize), for calibration
// only (never for goldens): the MX cast a torchao-faithful kernel performs.
//   x [M, N] fp32 -> per direction: element codes [rows, cols] (e2m1 unpacked or fp8), UE8M0
//   scales [rows, ceil(cols/32)], MXFP4 packed bytes [rows, ceil(cols/2)].
// Convention (torchao prototype/mx_formats to_mx): block amax = torch.amax(|x|) (NaN propagates,
// so a block holding a NaN gets scale byte 0xFF); the scale byte by the config's rule; elements
// x / scale_fp32 in fp32 (a NaN result is CUDA's canonical 0x7FFFFFFF); then torchao's E2M1 bit
// path (custom_fp_utils._f32_to_floatx_unpacked) or the FP8 clamp and cast.
// clamp_min_normal: torchao's `scale_fp32 = torch.clamp(scale_fp32, min=F32_MIN_NORMAL)`: a scale
// byte 0 divides by 2^-126, not 2^-127, and the elements come out half the spec's codes (an
// upstream defect; a calibration mutant).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "reference/quant/quant.h"

namespace assay::quant {
namespace {

// torchao custom_fp_utils._f32_to_floatx_unpacked(x, ebits = 2, mbits = 1) on the fp32 bits
// (saturate, denormal and normal paths; no special encodings), the E2M1 cast of torchao's to_mx.
uint8_t ao_f32_to_f4_unpacked(float xf) {
  const uint32_t xb = std::bit_cast<uint32_t>(xf);
  const uint32_t sign = xb & 0x80000000u;
  const uint32_t ab = xb ^ sign;
  const float x = std::bit_cast<float>(ab);
  uint32_t code;
  if (x >= 6.0f) {
    code = 7;  // max_int
  } else if (x < 1.0f) {  // min_normal = 2^(1 - exp_bias) = 1
    const uint32_t denorm_mask_int = (126u + 22u + 1u) << 23;  // ((127 - 1) + (23 - 1) + 1) << 23
    const float den = x + std::bit_cast<float>(denorm_mask_int);
    code = (std::bit_cast<uint32_t>(den) - denorm_mask_int) & 0xFFu;
  } else {  // also NaN: every comparison above is false
    const uint32_t mant_odd = (ab >> 22) & 1u;
    const uint32_t val_to_add = static_cast<uint32_t>(static_cast<int32_t>(1 - 127) * (1 << 23)) + ((1u << 21) - 1u);
    code = ((ab + val_to_add + mant_odd) >> 22) & 0xFFu;  // .to(torch.uint8) wraps
  }
  return static_cast<uint8_t>((code | (sign >> 28)) & 0xFu);
}

}  // namespace

MxResult mx_quantize_torchao(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg,
                             bool clamp_min_normal) {
  const bool fp4 = cfg.elem == DType::e2m1;
  const double maxv = info(cfg.elem).max_finite;
  const int emax = mx_emax(cfg.elem);
  MxResult res;
  auto one = [&](const std::vector<float>& hp, int64_t rows, int64_t cols) {
    MxDir d;
    d.rows = rows, d.cols = cols;
    const int64_t sc = d.scale_cols();
    d.codes.assign(static_cast<size_t>(rows * cols), 0);
    d.scales.assign(static_cast<size_t>(rows * sc), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < sc; ++b) {
        const int64_t c0 = b * 32, c1 = std::min(cols, c0 + 32);
        float a = 0.0f;
        for (int64_t k = c0; k < c1; ++k) {
          const float v = std::fabs(hp[r * cols + k]);
          a = (std::isnan(a) || std::isnan(v)) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, v);
        }
        const uint8_t e = cfg.rule == MxScaleRule::rceil
                              ? ue8m0_from_f32_rceil(a * static_cast<float>(1.0 / maxv))
                              : ue8m0_floor_exponent(a, emax);
        d.scales[r * sc + b] = e;
        const float s = e == 0xFF ? std::numeric_limits<float>::quiet_NaN()
                                  : static_cast<float>(std::ldexp(1.0, std::max(static_cast<int>(e) - 127, clamp_min_normal ? -126 : -127)));
        for (int64_t k = c0; k < c1; ++k) {
          float y = hp[r * cols + k] / s;
          if (std::isnan(y)) y = std::bit_cast<float>(0x7FFFFFFFu);  // CUDA's canonical NaN
          if (fp4) {
            d.codes[r * cols + k] = ao_f32_to_f4_unpacked(y);
          } else {
            const double yc = std::isnan(y) ? static_cast<double>(y) : std::clamp(static_cast<double>(y), -maxv, maxv);
            d.codes[r * cols + k] = static_cast<uint8_t>(encode(cfg.elem, yc, Overflow::satfinite));
          }
        }
      }
    if (fp4) d.packed = pack_e2m1(d.codes, rows, cols);
    return d;
  };
  if (cfg.rowwise) res.row = one(x, M, N);
  if (cfg.columnwise) {
    std::vector<float> t(x.size());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) t[j * M + i] = x[i * N + j];
    res.col = one(t, N, M);
  }
  return res;
}

}  // namespace assay::quant
