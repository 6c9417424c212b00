// The quant kernels' scalar arithmetic (kernels/quant/quant_math.h), compiled for the host, against
// the oracle's independent codecs (reference/core/dtype.h: exact fp64 RNE). The device build uses
// the same source; only qm_* (one IEEE rounding each, on both sides) differ by spelling.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "catch_compat.h"
#include "kernels/quant/quant_math.h"
#include "reference/core/dtype.h"
#include "reference/quant/quant.h"

using namespace assay;
namespace qm = assay::kernels::quant;

namespace {
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
// The oracle's E2M1 code for a non-NaN fp32 (RNE from the exact value, saturating to +-6).
uint32_t oracle_e2m1(float y) { return static_cast<uint32_t>(encode(DType::e2m1, y, Overflow::satfinite)); }
}  // namespace

TEST_CASE("kernel E2M1 encode matches the oracle on every fp32 near each decision point", "[cpu][L0]") {
  // Decision points (midpoints, grid values, the saturation edge) and both signs: every fp32
  // within 2^14 ulps of each, plus 0, the subnormals' ends, Inf and huge values.
  const float points[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f,
                          4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 1e-38f, 3.4e38f};
  int64_t checked = 0, bad = 0;
  uint32_t first_bad = 0;
  auto check = [&](uint32_t u) {
    const float y = from_bits(u);
    if (std::isnan(y)) return;
    ++checked;
    if (qm::e2m1_code(y) != oracle_e2m1(y) && bad++ == 0) first_bad = u;
  };
  for (float p : points)
    for (uint32_t sign : {0u, 0x80000000u}) {
      const int64_t c = bits(p);
      for (int64_t d = -(1 << 14); d <= (1 << 14); ++d) {
        const int64_t u = c + d;
        if (u >= 0 && u <= 0x7F800000) check(static_cast<uint32_t>(u) | sign);
      }
    }
  // A stride over all of fp32 (every 4099th pattern: all exponents, mixed mantissas).
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) check(static_cast<uint32_t>(u));
  INFO("first mismatch: bits 0x" << std::hex << first_bad << " kernel " << qm::e2m1_code(from_bits(first_bad))
                                 << " oracle " << oracle_e2m1(from_bits(first_bad)));
  CHECK(checked > 2000000);
  CHECK(bad == 0);
  // NaN -> +6 whatever its sign (the oracle has no E2M1 NaN either: it also maps NaN to +6).
  CHECK(qm::e2m1_code(std::numeric_limits<float>::quiet_NaN()) == 7u);
  CHECK(qm::e2m1_code(from_bits(0xFFC00000u)) == 7u);
  CHECK(qm::e2m1_code(-0.0f) == 8u);  // the sign of zero is kept
  CHECK(qm::e2m1_code(-INFINITY) == 15u);
}

TEST_CASE("kernel E2M1 decode inverts the encode on all 16 codes", "[cpu][L0]") {
  for (uint32_t c = 0; c < 16; ++c) {
    const float v = qm::e2m1_decode(static_cast<uint8_t>(c));
    CHECK(static_cast<double>(v) == decode(DType::e2m1, c));
    CHECK(qm::e2m1_code(v) == c);
  }
}

TEST_CASE("kernel E2M1 stochastic rounding matches the oracle's independent form for every random byte", "[cpu][L0]") {
  // Every grid step region, its edges and the saturation edge, both signs, each with all 256 bytes.
  std::vector<float> ys;
  for (float p : {0.0f, 0.1f, 0.25f, 0.5f, 0.7f, 1.0f, 1.4f, 1.5f, 1.99f, 2.0f, 2.3f, 3.0f, 3.99f, 4.0f, 5.0f, 5.9f,
                  6.0f, 7.0f, 1e30f, INFINITY})
    for (int d = -3; d <= 3; ++d) {
      const float y = from_bits(static_cast<uint32_t>(static_cast<int64_t>(bits(p)) + d));
      if (!std::isnan(y) && y >= 0) ys.push_back(y), ys.push_back(-y);
    }
  for (uint32_t u = 0x3E000000u; u < 0x40E00000u; u += 997) ys.push_back(from_bits(u));  // 0.125 .. 7
  int64_t bad = 0;
  for (float y : ys)
    for (int rb = 0; rb < 256; ++rb)
      if (qm::e2m1_sr_code(y, static_cast<uint8_t>(rb)) != assay::quant::ref::e2m1_sr_ref(y, static_cast<uint8_t>(rb)) &&
          bad++ == 0)
        FAIL_CHECK("y = " << y << " rb = " << rb << ": kernel " << qm::e2m1_sr_code(y, static_cast<uint8_t>(rb))
                          << " oracle " << int(assay::quant::ref::e2m1_sr_ref(y, static_cast<uint8_t>(rb))));
  CHECK(ys.size() > 30000);
  CHECK(bad == 0);
  CHECK(qm::e2m1_sr_code(std::numeric_limits<float>::quiet_NaN(), 0) == 7u);
}
