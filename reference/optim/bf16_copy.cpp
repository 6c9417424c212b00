// BF16 copies of fp32 master weights (spec B2): the TE remainder split / merge and stochastic
// rounding (torchao, PTX cvt.rs). The RNE copy is bf16_rne (optim_common.cpp). See optim.h.
#include <bit>
#include <cmath>

#include "reference/optim/optim.h"

namespace assay::optim {

Bf16Remainder te_split_remainder(float master) {
  const uint32_t b = bits_of(master);
  uint16_t hi = static_cast<uint16_t>(b >> 16);
  const uint16_t lo = static_cast<uint16_t>(b & 0xFFFFu);
  const int16_t rem = static_cast<int16_t>(lo);
  if (rem < 0) hi = static_cast<uint16_t>(hi + 1u);  // int16 ++ (two's complement wrap)
  return {hi, rem};
}
float te_merge_remainder(Bf16Remainder pr) {
  uint16_t hi = pr.param;
  if (pr.remainder < 0) hi = static_cast<uint16_t>(hi - 1u);
  const uint32_t b = (static_cast<uint32_t>(hi) << 16) | static_cast<uint16_t>(pr.remainder);
  return float_of(b);
}

uint16_t bf16_sr_torchao(float x, uint16_t r) {
  const uint32_t b = bits_of(x);
  if (!std::isfinite(x)) {
    if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x0040u);
    return static_cast<uint16_t>(b >> 16);
  }
  const uint32_t frac = b & 0xFFFFu;
  const uint32_t toward_zero = b & 0xFFFF0000u;
  const uint32_t out = (static_cast<uint32_t>(r) < frac) ? toward_zero + 0x10000u : toward_zero;
  return static_cast<uint16_t>(out >> 16);
}
uint16_t bf16_sr_ptx(float x, uint16_t r) {
  const uint32_t b = bits_of(x);
  if (!std::isfinite(x)) {
    if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x0040u);
    return static_cast<uint16_t>(b >> 16);
  }
  return static_cast<uint16_t>((b + r) >> 16);
}

}  // namespace assay::optim
