// Tests of the quantization oracles (reference/quant). Expected values are either derived by hand
// in a comment or come from the independently built form (quant::ref). The agreement figures are
// printed (WARN) so that the report can quote them.
#include <chrono>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "catch_compat.h"
#include "tests/common.h"
#include "reference/core/dtype.h"
#include "reference/quant/quant.h"

using namespace assay;
using namespace assay::quant;

namespace {

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

float to_bf16(double v) { return static_cast<float>(round_to(DType::bf16, v)); }

// bf16-valued matrix with a few outliers and some exact zeros / tiny blocks.
std::vector<float> bf16_matrix(int64_t M, int64_t N, uint64_t seed, double scale = 1.0) {
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

float f32_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void require_same_dir(const Nvfp4Dir& a, const Nvfp4Dir& b, const char* what) {
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

}  // namespace

// ================================================================================================
// Scalar codecs
// ================================================================================================

TEST_CASE("E2M1: every midpoint and boundary, codec vs spec table vs exhaustive", "[cpu][L0]") {
  // Spec A2.4: ties 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4; (5, inf) -> 6.
  struct Case { float y; uint8_t code; };
  const Case cases[] = {{0.0f, 0},  {0.25f, 0}, {0.75f, 2},  {1.25f, 2},  {1.75f, 4}, {2.5f, 4},
                        {3.5f, 6},  {5.0f, 6},  {6.0f, 7},   {7.0f, 7},   {1e30f, 7}, {-0.25f, 8},
                        {-0.75f, 10}, {-5.0f, 14}, {-6.5f, 15}, {0.5f, 1}, {3.0f, 5}, {4.0f, 6}};
  for (const auto& c : cases) {
    INFO("y = " << c.y);
    CHECK(e2m1_rn(c.y) == c.code);
    CHECK(ref::e2m1_table(c.y) == c.code);
    CHECK(ref::encode_exhaustive(DType::e2m1, c.y, Overflow::satfinite) == c.code);
  }
  // +-1 fp32 ulp around every midpoint: the side decides.
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const uint8_t below[] = {0, 1, 2, 3, 4, 5, 6}, above[] = {1, 2, 3, 4, 5, 6, 7};
  for (int i = 0; i < 7; ++i) {
    CHECK(e2m1_rn(std::nextafter(mids[i], 0.0f)) == below[i]);
    CHECK(e2m1_rn(std::nextafter(mids[i], 10.0f)) == above[i]);
    CHECK(ref::e2m1_table(std::nextafter(mids[i], 10.0f)) == above[i]);
  }
  // Dense sweep: all multiples of 2^-14 in [-8, 8] plus +-1 ulp neighbours; the three encoders agree.
  int64_t n = 0, bad = 0;
  for (int64_t k = -8 * 16384; k <= 8 * 16384; ++k) {
    const float y0 = static_cast<float>(std::ldexp(static_cast<double>(k), -14));
    for (float y : {y0, std::nextafter(y0, -1e9f), std::nextafter(y0, 1e9f)}) {
      const uint8_t a = e2m1_rn(y), b = ref::e2m1_table(y),
                    c = ref::encode_exhaustive(DType::e2m1, y, Overflow::satfinite);
      ++n;
      if (a != b || a != c) ++bad;
    }
  }
  WARN("E2M1 codec vs table vs exhaustive: " << bad << " disagreements over " << n << " inputs");
  CHECK(bad == 0);
  // NaN -> +6 (TE satfinite fallback), Inf -> +-6.
  CHECK(e2m1_rn(std::numeric_limits<float>::quiet_NaN()) == 7);
  CHECK(e2m1_rn(-std::numeric_limits<float>::infinity()) == 15);
}

TEST_CASE("E4M3/E5M2: every midpoint, boundary and overflow rule vs exhaustive search", "[cpu][L0]") {
  for (DType t : {DType::e4m3, DType::e5m2}) {
    const int maxc = t == DType::e4m3 ? 0x7E : 0x7B;
    int64_t n = 0, bad = 0;
    for (Overflow ov : {Overflow::satfinite, Overflow::nonsat}) {
      for (int c = 0; c < maxc; ++c) {
        const double lo = decode(t, static_cast<uint64_t>(c)), hi = decode(t, static_cast<uint64_t>(c + 1));
        const float mid = static_cast<float>(0.5 * (lo + hi));  // exact in fp32
        REQUIRE(static_cast<double>(mid) == 0.5 * (lo + hi));
        for (float y : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)})
          for (float s : {y, -y}) {
            const uint64_t a = encode_f32(t, s, ov);
            const uint8_t b = ref::encode_exhaustive(t, s, ov);
            ++n;
            if (a != b) {
              ++bad;
              if (bad < 5) WARN(name(t) << " x=" << s << " codec=" << a << " exhaustive=" << int(b));
            }
          }
        // tie rule at the midpoint: the even code
        CHECK(encode_f32(t, mid, ov) == static_cast<uint64_t>((c % 2 == 0) ? c : c + 1));
      }
    }
    WARN(name(t) << " codec vs exhaustive: " << bad << " disagreements over " << n << " inputs");
    CHECK(bad == 0);
  }
  // Overflow (A2.1): E4M3 464 is a tie -> 448; above -> sat 448 / nonsat NaN (sign kept).
  CHECK(encode_f32(DType::e4m3, 464.0f, Overflow::satfinite) == 0x7E);
  CHECK(encode_f32(DType::e4m3, 464.0f, Overflow::nonsat) == 0x7E);
  CHECK(encode_f32(DType::e4m3, std::nextafter(464.0f, 1e9f), Overflow::satfinite) == 0x7E);
  CHECK(encode_f32(DType::e4m3, std::nextafter(464.0f, 1e9f), Overflow::nonsat) == 0x7F);
  CHECK(encode_f32(DType::e4m3, -1e30f, Overflow::nonsat) == 0xFF);
  CHECK(encode_f32(DType::e4m3, -INFINITY, Overflow::satfinite) == 0xFE);
  CHECK(ref::encode_exhaustive(DType::e4m3, std::nextafter(464.0, 1e9), Overflow::nonsat) == 0x7F);
  // E5M2: 61440 is overflow (57344 has an odd mantissa).
  CHECK(encode_f32(DType::e5m2, 61440.0f, Overflow::satfinite) == 0x7B);
  CHECK(encode_f32(DType::e5m2, 61440.0f, Overflow::nonsat) == 0x7C);
  CHECK(ref::encode_exhaustive(DType::e5m2, 61440.0, Overflow::nonsat) == 0x7C);
  CHECK(encode_f32(DType::e5m2, std::nextafter(61440.0f, 0.0f), Overflow::nonsat) == 0x7B);
  // Subnormals: half the smallest subnormal is a tie to 0.
  CHECK(encode_f32(DType::e4m3, 0x1.0p-10f, Overflow::satfinite) == 0x00);
  CHECK(encode_f32(DType::e4m3, std::nextafter(0x1.0p-10f, 1.0f), Overflow::satfinite) == 0x01);
  CHECK(encode_f32(DType::e5m2, 0x1.0p-17f, Overflow::satfinite) == 0x00);
}

TEST_CASE("UE8M0: RCEIL and floor rules vs frexp derivations over all fp32 exponents", "[cpu][L0]") {
  int64_t n = 0, bad_r = 0, bad_f = 0;
  Rng g(7);
  for (uint32_t e = 0; e < 256; ++e)
    for (int k = 0; k < 64; ++k) {
      uint32_t mant = k == 0 ? 0u : (k == 1 ? 1u : (k == 2 ? 0x400000u : (k == 3 ? 0x400001u : (k == 4 ? 0x7FFFFFu : static_cast<uint32_t>(g.next() & 0x7FFFFF)))));
      const float v = f32_bits((e << 23) | mant);
      ++n;
      if (ue8m0_from_f32_rceil(v) != ref::ue8m0_rceil_ref(v)) {
        ++bad_r;
        if (bad_r < 4) WARN("rceil v=" << v << " core=" << int(ue8m0_from_f32_rceil(v)) << " ref=" << int(ref::ue8m0_rceil_ref(v)));
      }
      for (int emax : {2, 8, 15})
        if (ue8m0_floor_exponent(v, emax) != ref::ue8m0_floor_ref(v, emax)) {
          ++bad_f;
          if (bad_f < 4) WARN("floor v=" << v << " emax=" << emax << " core=" << int(ue8m0_floor_exponent(v, emax)) << " ref=" << int(ref::ue8m0_floor_ref(v, emax)));
        }
    }
  WARN("UE8M0 rceil disagreements " << bad_r << ", floor " << bad_f << " over " << n << " inputs");
  CHECK(bad_r == 0);
  CHECK(bad_f == 0);
  // Hand-derived (A2.5): 1.0 -> 127; 1.0000001 -> 128; 2^-127 (bits 0x00400000) -> 0; just above -> 1.
  CHECK(ue8m0_from_f32_rceil(1.0f) == 127);
  CHECK(ue8m0_from_f32_rceil(std::nextafter(1.0f, 2.0f)) == 128);
  CHECK(ue8m0_from_f32_rceil(f32_bits(0x00400000)) == 0);
  CHECK(ue8m0_from_f32_rceil(f32_bits(0x00400001)) == 1);
  CHECK(ue8m0_from_f32_rceil(INFINITY) == 0xFE);
  CHECK(ue8m0_from_f32_rceil(NAN) == 0xFF);
}

TEST_CASE("packing: element 2k in the low nibble; odd widths", "[cpu][L0]") {
  // codes row 0: 1 2 3 ; row 1: 15 0 7 -> bytes (2<<4|1)=0x21, 0x03 ; (0<<4|15)=0x0F, 0x07
  std::vector<uint8_t> c = {1, 2, 3, 15, 0, 7};
  auto p = pack_e2m1(c, 2, 3);
  REQUIRE(p == std::vector<uint8_t>{0x21, 0x03, 0x0F, 0x07});
  REQUIRE(unpack_e2m1(p, 2, 3) == c);
}

// ================================================================================================
// NVFP4
// ================================================================================================

TEST_CASE("NVFP4 TE: hand-derived block (A = 448*6)", "[cpu][L0]") {
  // x = [2688, 1344, -672, 0, 1, ..]: A = 2688 -> S_enc = fl(2688/2688) = 1, S_dec = 1.
  // t = fl(1/6) = 0.16666667163...; s = fl(2688 * t) = 448.0000133.. -> fl = 448 (half ulp at 448 is
  // 2^-16 * 2 = 1.5e-5 > 1.3e-5), q_s = 448 = 0x7E. r = fl(1/448). y(2688) = fl(2688*fl(1/448)):
  // 2688/448 = 6 -> code 7; y(1344) ~ 3 -> code 5; y(-672) ~ -1.5 -> code 11; 0 -> 0;
  // y(1) = 1/448 = 0.00223 -> 0 (below 0.25).
  std::vector<float> x(16, 0.0f);
  x[0] = 2688;
  x[1] = 1344;
  x[2] = -672;
  x[4] = 1;
  Nvfp4Config cfg;
  auto r = nvfp4_quantize(x, 1, 16, cfg);
  REQUIRE(r.row);
  CHECK(r.row->s_enc == 1.0f);
  CHECK(r.row->scales[0] == 0x7E);
  CHECK(r.row->codes[0] == 7);
  CHECK(r.row->codes[1] == 5);
  CHECK(r.row->codes[2] == 11);
  CHECK(r.row->codes[3] == 0);
  CHECK(r.row->codes[4] == 0);
  CHECK(r.row->packed[0] == 0x57);  // element 0 (7) low nibble, element 1 (5) high nibble
  auto deq = nvfp4_dequantize_exact(*r.row);
  CHECK(deq[0] == 2688.0);
  CHECK(deq[2] == -672.0);
}

TEST_CASE("NVFP4 TE: q_s subnormal and q_s = 0 corners, zero amax, Inf", "[cpu][L0]") {
  // Block 0 holds A = 2688 (S_enc = 1, t = fl(1/6)). Block 1 amax 0.01: s = 0.01/6 = 0.001667 =
  // 0.853 * 2^-9 -> E4M3 subnormal code 0x01 (2^-9). Block 2 amax 0.001: s = 1.67e-4 < 2^-10 -> q_s = 0,
  // r = FLT_MAX: non-zero elements give +-6 codes (allowed set also holds 0); zeros stay 0.
  std::vector<float> x(48, 0.0f);
  x[0] = 2688;
  x[16] = 0.01f;
  x[17] = -0.004f;
  x[32] = 0.001f;
  x[33] = -0.0005f;
  Nvfp4Config cfg;
  auto r = nvfp4_quantize(x, 1, 48, cfg);
  const auto& d = *r.row;
  CHECK(d.scales[1] == 0x01);
  // y(0.01) = 0.01 * fl(1/2^-9) = 5.12 -> 6 (code 7); y(-0.004) = -2.048 -> -2 (code 12)
  CHECK(d.codes[16] == 7);
  CHECK(d.codes[17] == 12);
  CHECK(d.scales[2] == 0x00);
  CHECK(d.codes[32] == 7);
  CHECK(d.codes[33] == 15);
  CHECK(((d.allowed[32] >> 0) & 1) == 1);
  CHECK(d.codes[34] == 0);
  auto deq = nvfp4_dequantize_exact(d);
  CHECK(deq[32] == 0.0);
  auto ref = ref::nvfp4_quantize(x, 1, 48, cfg);
  require_same_dir(d, *ref.row, "q_s corners");
  // The old TE C++ test reference (r = 0 when q_s = 0): codes differ, but lie in the allowed set.
  Nvfp4Config alt = cfg;
  alt.mutant = Mutant::qs_zero_encode_zero;
  auto ra = nvfp4_quantize(x, 1, 48, alt);
  CHECK(ra.row->codes[32] == 0);
  CHECK_FALSE(compare_codes("codes", d.codes, &d.allowed, ra.row->codes, 1, 48, 1, 16).has_value());
  CHECK(compare_codes("codes", d.codes, nullptr, ra.row->codes, 1, 48, 1, 16).has_value());

  // All-zero tensor: A = 0 -> S_enc = 1 (kernel rule), every scale 0, every code 0.
  std::vector<float> z(32, 0.0f);
  auto rz = nvfp4_quantize(z, 2, 16, cfg);
  CHECK(rz.row->s_enc == 1.0f);
  for (auto s : rz.row->scales) CHECK(s == 0);
  for (auto c : rz.row->codes) CHECK(c == 0);
  // Inf element: A = Inf -> S_enc = fl(2688/Inf) = 0 -> 1; block s = Inf -> 448 (satfinite);
  // Inf * r = Inf -> code 7; 448 * fl(1/448) = 1 -> code 2.
  std::vector<float> xi(16, 0.0f);
  xi[0] = INFINITY;
  xi[1] = 448.0f;
  auto ri = nvfp4_quantize(xi, 1, 16, cfg);
  CHECK(ri.row->s_enc == 1.0f);
  CHECK(ri.row->scales[0] == 0x7E);
  CHECK(ri.row->codes[0] == 7);
  CHECK(ri.row->codes[1] == 2);
  // NaN element: dropped from the amax (fmaxf), its own code unspecified (all allowed).
  std::vector<float> xn(16, 1.0f);
  xn[3] = NAN;
  auto rn = nvfp4_quantize(xn, 1, 16, cfg);
  CHECK(rn.row->amax == 1.0f);
  CHECK(rn.row->allowed[3] == 0xFFFF);
  CHECK(rn.row->codes[0] == 7);  // 1 * r with q_s = 448, S_dec = 1/2688 -> y = 6
}

TEST_CASE("NVFP4 TE: kernel form vs tensor form, 1D/2D, rowwise/columnwise, ragged", "[cpu][L0]") {
  struct Shape2 { int64_t M, N; };
  int64_t elems = 0;
  for (Shape2 s : {Shape2{1, 16}, Shape2{16, 16}, Shape2{33, 50}, Shape2{128, 96}, Shape2{17, 255}})
    for (bool two_d : {false, true}) {
      auto x = bf16_matrix(s.M, s.N, 1000 + s.M * 7 + s.N + (two_d ? 1 : 0));
      Nvfp4Config cfg;
      cfg.columnwise = true;
      cfg.block_2d = two_d;
      auto a = nvfp4_quantize(x, s.M, s.N, cfg);
      auto b = ref::nvfp4_quantize(x, s.M, s.N, cfg);
      require_same_dir(*a.row, *b.row, "rowwise");
      require_same_dir(*a.col, *b.col, "columnwise");
      elems += 2 * s.M * s.N;
      if (two_d) {
        // 2D: rowwise and columnwise are exact transposes (A3.3).
        for (int64_t m = 0; m < s.M; ++m)
          for (int64_t n = 0; n < s.N; ++n) {
            REQUIRE(a.row->codes[m * s.N + n] == a.col->codes[n * s.M + m]);
            REQUIRE(a.row->scales[m * a.row->scale_cols() + n / 16] == a.col->scales[n * a.col->scale_cols() + m / 16]);
          }
      }
    }
  WARN("NVFP4 TE forms: bit-identical codes/scales/amax/packed over " << elems << " elements");
}

TEST_CASE("NVFP4: separate rowwise / columnwise amax", "[cpu][L0]") {
  auto x = bf16_matrix(32, 32, 99);
  Nvfp4Config cfg;
  cfg.columnwise = true;
  cfg.amax_rowwise = 10.0f;
  cfg.amax_columnwise = 20.0f;
  auto a = nvfp4_quantize(x, 32, 32, cfg);
  auto b = ref::nvfp4_quantize(x, 32, 32, cfg);
  CHECK(a.row->amax == 10.0f);
  CHECK(a.col->amax == 20.0f);
  CHECK(a.row->s_enc == 2688.0f / 10.0f);
  CHECK(a.col->s_enc == 2688.0f / 20.0f);
  require_same_dir(*a.row, *b.row, "row");
  require_same_dir(*a.col, *b.col, "col");
}

TEST_CASE("NVFP4 RHT: exact-sum form vs FWHT form; sign vector; post-RHT amax", "[cpu][L0]") {
  // Sign vector (A3.4): + + + - + - - - - - - + - + - -  -> bits set at i = 3,5,6,7,8,9,10,12,14,15
  // = 0x0008+0x0020+0x0040+0x0080+0x0100+0x0200+0x0400+0x1000+0x4000+0x8000 = 0xD7E8.
  const int signs[16] = {+1, +1, +1, -1, +1, -1, -1, -1, -1, -1, -1, +1, -1, +1, -1, -1};
  uint16_t mask = 0;
  for (int i = 0; i < 16; ++i)
    if (signs[i] < 0) mask = static_cast<uint16_t>(mask | (1u << i));
  REQUIRE(mask == 0xD7E8);
  REQUIRE(Nvfp4Config{}.rht_sign_mask == 0xD7E8);
  // A unit vector e_0 along M: v'_j = 1/4 * s_0 * H[0][j] = 0.25 for all j.
  {
    std::vector<float> x(16, 0.0f);
    x[0] = 1.0f;
    auto t = rht_columnwise(x, 16, 1, 0xD7E8);
    for (float v : t) CHECK(v == 0.25f);
    // e_3 (s_3 = -1): v'_j = -1/4 * (-1)^popcount(3 & j)
    std::fill(x.begin(), x.end(), 0.0f);
    x[3] = 1.0f;
    t = rht_columnwise(x, 16, 1, 0xD7E8);
    for (int j = 0; j < 16; ++j) CHECK(t[j] == (__builtin_popcount(3 & j) % 2 ? 0.25f : -0.25f));
  }
  int64_t n = 0, bad = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t M = 64, N = 40;
    auto x = bf16_matrix(M, N, 500 + rep, rep == 3 ? 1e-30 : 1.0);
    auto a = rht_columnwise(x, M, N, 0xD7E8);
    auto b = ref::rht_columnwise_fwht(x, M, N, 0xD7E8);
    for (size_t i = 0; i < a.size(); ++i) {
      ++n;
      if (std::memcmp(&a[i], &b[i], 4) != 0) ++bad;
    }
    Nvfp4Config cfg;
    cfg.columnwise = true;
    cfg.rht = true;
    auto qa = nvfp4_quantize(x, M, N, cfg);
    auto qb = ref::nvfp4_quantize(x, M, N, cfg);
    require_same_dir(*qa.row, *qb.row, "rht row");
    require_same_dir(*qa.col, *qb.col, "rht col");
    float post = 0;
    for (float v : a) post = std::max(post, std::fabs(v));
    CHECK(qa.col->amax == post);  // post-RHT amax
    CHECK(qa.col->hp == a);
  }
  WARN("RHT exact-sum vs FWHT: " << bad << " bf16 differences over " << n << " outputs");
  CHECK(bad == 0);
  // A sum whose exact value is a bf16 tie broken by a tiny term: 1 + 2^-8 (tie) + 2^-40 -> rounds up.
  double terms[3] = {1.0, 0x1.0p-8, 0x1.0p-40};
  CHECK(bf16_round_exact_sum(terms, 3) == 1.0078125f);
  double terms2[2] = {1.0, 0x1.0p-8};
  CHECK(bf16_round_exact_sum(terms2, 2) == 1.0f);  // exact tie -> even
  double terms3[3] = {1.0, 0x1.0p-8, -0x1.0p-60};
  CHECK(bf16_round_exact_sum(terms3, 3) == 1.0f);
}

TEST_CASE("NVFP4 SR: replay, grid points fixed, unbiasedness and P(up) over 1e6 draws", "[cpu][L0]") {
  // Replay: kernel emulation (fp32 fma) vs the exact-sum form, on every rbits value.
  Rng g(42);
  int64_t n = 0, bad = 0;
  for (int i = 0; i < 4000; ++i) {
    const float y = static_cast<float>((g.uniform() * 2 - 1) * 7.0);
    for (int rb = 0; rb < 256; ++rb) {
      ++n;
      if (e2m1_sr(y, static_cast<uint8_t>(rb)) != ref::e2m1_sr_ref(y, static_cast<uint8_t>(rb))) ++bad;
    }
  }
  WARN("SR kernel-emulation vs exact-sum form: " << bad << " disagreements over " << n);
  CHECK(bad == 0);
  // Grid points never move; saturation and sign.
  for (int c = 0; c < 16; ++c)
    for (int rb = 0; rb < 256; ++rb) {
      const float y = static_cast<float>(e2m1_value(static_cast<uint8_t>(c)));
      const uint8_t q = e2m1_sr(y, static_cast<uint8_t>(rb));
      REQUIRE(e2m1_value(q) == static_cast<double>(y));
    }
  CHECK(e2m1_sr(7.5f, 255) == 7);
  CHECK(e2m1_sr(-100.0f, 0) == 15);
  // Every SR output is one of the two grid neighbours of y.
  // Statistics: for each y, 2^20 draws of rbits from splitmix64. With 8 random bits, P(up) is
  // exactly #{k in 0..255 : fl(|y| + k/256*step) >= hi} / 256 (computed by enumeration); the
  // observed count must lie within 5 binomial sigmas, and the mean within 5 sigma/sqrt(N) of
  // lo + step * P(up), which is itself within step/256 of y (8-bit quantisation of P).
  const float ys[] = {0.1f, 0.3f, 1.1f, 1.9f, 2.2f, 3.7f, 4.5f, 5.99f, -2.75f};
  const int64_t draws = 1 << 20;
  for (float y : ys) {
    const double a = std::fabs(y);
    int lo = 0;
    while (lo < 7 && kE2M1[lo + 1] <= a) ++lo;
    const double lov = kE2M1[lo], hiv = kE2M1[lo + 1], step = hiv - lov;
    int kup = 0;
    for (int rb = 0; rb < 256; ++rb)
      if (std::fabs(e2m1_value(e2m1_sr(y, static_cast<uint8_t>(rb)))) == hiv) ++kup;
    const double p = kup / 256.0;
    CHECK(std::fabs(lov + step * p - a) <= step / 256.0 + 1e-12);
    Rng r(1234 + static_cast<uint64_t>(a * 1000));
    int64_t ups = 0;
    double sum = 0;
    for (int64_t i = 0; i < draws; ++i) {
      const uint8_t q = e2m1_sr(y, static_cast<uint8_t>(r.next() >> 56));
      const double v = std::fabs(e2m1_value(q));
      REQUIRE((v == lov || v == hiv));
      ups += v == hiv;
      sum += v;
    }
    const double sd = std::sqrt(draws * p * (1 - p));
    INFO("y = " << y << " p = " << p << " ups = " << ups);
    CHECK(std::fabs(static_cast<double>(ups) - draws * p) <= 5 * sd + 1e-9);
    const double mean = sum / draws, sigma = step * std::sqrt(p * (1 - p));
    CHECK(std::fabs(mean - (lov + step * p)) <= 5 * sigma / std::sqrt(static_cast<double>(draws)) + 1e-12);
    CHECK(std::fabs(mean - a) <= step / 256.0 + 5 * sigma / std::sqrt(static_cast<double>(draws)) + 1e-12);
  }
  // SR through the quantizer with explicit rbits: both forms replay identically.
  const int64_t M = 32, N = 48;
  auto x = bf16_matrix(M, N, 77);
  std::vector<uint8_t> rr(M * N), rc(M * N);
  for (auto& v : rr) v = static_cast<uint8_t>(g.next());
  for (auto& v : rc) v = static_cast<uint8_t>(g.next());
  Nvfp4Config cfg;
  cfg.columnwise = true;
  cfg.stochastic = true;
  auto qa = nvfp4_quantize(x, M, N, cfg, &rr, &rc);
  auto qb = ref::nvfp4_quantize(x, M, N, cfg, &rr, &rc);
  require_same_dir(*qa.row, *qb.row, "sr row");
  require_same_dir(*qa.col, *qb.col, "sr col");
}

TEST_CASE("NVFP4 torchao recipe: forms agree; differs from TE; zero tensor", "[cpu][L0]") {
  int64_t diff_codes = 0, diff_scales = 0, total = 0;
  for (bool cuda : {true, false})
    for (bool two : {true, false}) {
      auto x = bf16_matrix(48, 64, 4242 + cuda + 2 * two);
      Nvfp4Config cfg;
      cfg.recipe = Nvfp4Recipe::torchao;
      cfg.ao_cuda_scalar_div = cuda;
      cfg.ao_two_level = two;
      cfg.columnwise = true;
      auto a = nvfp4_quantize(x, 48, 64, cfg);
      auto b = ref::nvfp4_quantize(x, 48, 64, cfg);
      require_same_dir(*a.row, *b.row, "ao row");
      require_same_dir(*a.col, *b.col, "ao col");
      // torchao scales are clamped to >= 2^-6: never zero or subnormal.
      for (auto s : a.row->scales) CHECK(s >= 0x08);
      Nvfp4Config te;
      te.columnwise = true;
      auto t = nvfp4_quantize(x, 48, 64, te);
      for (size_t i = 0; i < t.row->codes.size(); ++i) diff_codes += t.row->codes[i] != a.row->codes[i];
      for (size_t i = 0; i < t.row->scales.size(); ++i) diff_scales += t.row->scales[i] != a.row->scales[i];
      total += static_cast<int64_t>(t.row->codes.size());
    }
  WARN("torchao vs TE recipe: " << diff_codes << " codes and " << diff_scales << " scales differ over "
                                << total << " elements (expected: different recipes)");
  // All-zero tensor under torchao: pts = 0, 0/0 = NaN scale (clamp keeps NaN) -> 0x7F scales and
  // unspecified codes (all allowed). Documented torchao behaviour, not TE's.
  std::vector<float> z(16, 0.0f);
  Nvfp4Config cfg;
  cfg.recipe = Nvfp4Recipe::torchao;
  auto rz = nvfp4_quantize(z, 1, 16, cfg);
  CHECK(rz.row->scales[0] == 0x7F);
  CHECK(rz.row->allowed[0] == 0xFFFF);
}

TEST_CASE("NVFP4 dequantize: TE kernel fp32 form vs exact", "[cpu][L0]") {
  // TE dequant uses fl(fl(q_s*A)*fl(1/2688)) instead of S_dec = fl(1/fl(2688/A)): a couple of fp32
  // ulps apart. Several tensor scales so that A takes different mantissas.
  double worst = 0;
  int64_t differ = 0, n = 0;
  for (int k = 0; k < 12; ++k) {
    auto x = bf16_matrix(16, 64, 31337 + k, std::pow(1.37, k));
    Nvfp4Config cfg;
    auto r = nvfp4_quantize(x, 16, 64, cfg);
    auto te = nvfp4_dequantize_te(*r.row);
    auto ex = nvfp4_dequantize_exact(*r.row);
    for (size_t i = 0; i < ex.size(); ++i) {
      if (ex[i] == 0) continue;
      ++n;
      differ += te[i] != ex[i];
      worst = std::max(worst, std::fabs(te[i] - ex[i]) / std::fabs(ex[i]));
    }
  }
  WARN("NVFP4 dequant TE-fp32 vs exact: " << differ << " of " << n << " non-zero values differ, worst rel "
                                          << worst);
  CHECK(worst <= 4 * 0x1.0p-24);
}

TEST_CASE("special values through every recipe: forms agree", "[cpu][L0]") {
  // zeros (+-0), fp32 and bf16 subnormals, E2M1/E4M3 midpoints, 448*6, beyond max, +-Inf, NaN;
  // ragged 40 x 70 so that blocks of 16, 32 and 128 are all partial at the edges.
  const int64_t M = 48, N = 70;
  auto x = bf16_matrix(M, N, 8080);
  const float specials[] = {0.0f, -0.0f, 0x1.0p-149f, -0x1.0p-140f, 0x1.0p-133f, 1e-38f, 0.25f, 0.75f, 2.5f,
                            5.0f, 2688.0f, -2688.0f, 464.0f, 480.0f, 1e30f, -1e30f, 57344.0f, 61440.0f,
                            INFINITY, -INFINITY, NAN};
  Rng g(9);
  for (int i = 0; i < 200; ++i) x[g.next() % (M * N)] = specials[g.next() % 21];
  for (int64_t c = 0; c < 16; ++c) x[2 * N + c] = 0.0f;  // an all-zero block in row 2
  int64_t cmp = 0;
  auto same_nan_class = [&](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType t) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ++cmp;
      if (is_nan_code(t, a[i])) CHECK(is_nan_code(t, b[i]));
      else CHECK(a[i] == b[i]);
    }
  };
  for (auto rec : {Nvfp4Recipe::te, Nvfp4Recipe::torchao})
    for (bool two_d : {false, true}) {
      if (rec == Nvfp4Recipe::torchao && two_d) continue;
      Nvfp4Config cfg;
      cfg.recipe = rec;
      cfg.block_2d = two_d;
      cfg.columnwise = true;
      auto a = nvfp4_quantize(x, M, N, cfg);
      auto b = ref::nvfp4_quantize(x, M, N, cfg);
      for (auto [da, db] : {std::pair{&*a.row, &*b.row}, std::pair{&*a.col, &*b.col}}) {
        same_nan_class(da->scales, db->scales, DType::e4m3);
        // codes: compare within the allowed set of the kernel form
        auto mm = compare_codes("codes", da->codes, &da->allowed, db->codes, da->rows, da->cols, 1, 16);
        CHECK_FALSE(mm.has_value());
        if (mm) WARN(mm->message);
      }
    }
  for (DType el : {DType::e4m3, DType::e5m2, DType::e2m1})
    for (auto rule : {MxScaleRule::floor, MxScaleRule::rceil}) {
      MxConfig cfg;
      cfg.elem = el;
      cfg.rule = rule;
      cfg.columnwise = true;
      auto a = mx_quantize(x, M, N, cfg);
      auto b = ref::mx_quantize(x, M, N, cfg);
      CHECK(a.row->scales == b.row->scales);
      CHECK(a.col->scales == b.col->scales);
      if (el == DType::e2m1) {
        CHECK_FALSE(compare_codes("mxfp4", a.row->codes, &a.row->allowed, b.row->codes, M, N, 1, 32).has_value());
      } else {
        same_nan_class(a.row->codes, b.row->codes, el);
        same_nan_class(a.col->codes, b.col->codes, el);
      }
    }
  for (auto gran : {Fp8Granularity::per_tensor, Fp8Granularity::per_channel, Fp8Granularity::block_1x128,
                    Fp8Granularity::block_128x128})
    for (auto rec : {Fp8ScaleRecipe::te_current, Fp8ScaleRecipe::deepgemm})
      for (auto ov : {Overflow::satfinite, Overflow::nonsat}) {
        Fp8Config cfg;
        cfg.gran = gran;
        cfg.recipe = rec;
        cfg.overflow = ov;
        auto a = fp8_quantize(x, M, N, cfg);
        auto b = ref::fp8_quantize(x, M, N, cfg);
        same_nan_class(a.codes, b.codes, DType::e4m3);
        for (size_t i = 0; i < a.scale.size(); ++i) {
          CHECK((a.scale[i] == b.scale[i] || (std::isnan(a.scale[i]) && std::isnan(b.scale[i]))));
          CHECK((a.scale_inv[i] == b.scale_inv[i] || (std::isnan(a.scale_inv[i]) && std::isnan(b.scale_inv[i]))));
        }
      }
  WARN("special-value fixture: " << cmp << " code comparisons, forms agree");
}

TEST_CASE("FP8 codecs vs exhaustive search on random fp32 inputs", "[cpu][L0]") {
  Rng g(606);
  int64_t n = 0, bad = 0;
  for (int i = 0; i < 60000; ++i) {
    // random sign/exponent in the interesting range [2^-20, 2^18) and random mantissa
    const uint32_t e = 107 + static_cast<uint32_t>(g.next() % 38);
    const float v = f32_bits(((g.next() & 1) << 31) | (e << 23) | static_cast<uint32_t>(g.next() & 0x7FFFFF));
    for (DType t : {DType::e4m3, DType::e5m2})
      for (Overflow ov : {Overflow::satfinite, Overflow::nonsat}) {
        ++n;
        if (encode_f32(t, v, ov) != ref::encode_exhaustive(t, v, ov)) ++bad;
      }
  }
  WARN("FP8 codec vs exhaustive on random fp32: " << bad << " disagreements over " << n);
  CHECK(bad == 0);
}

// ================================================================================================
// MX
// ================================================================================================

TEST_CASE("MX: hand-derived floor vs RCEIL blocks", "[cpu][L0]") {
  // MXFP8 E4M3, block amax 1.9 (fp32 1.89999998):
  //  floor: floor(log2 1.9) - 8 = -8 -> byte 119; 1.9 * 2^8 = 486.4 > 464 -> saturates to 448 (0x7E).
  //  rceil: fl(1.9 * fl(1/448)) = 0.00424 -> ceil(log2) = -7 -> byte 120; 1.9 * 2^7 = 243.2 -> 240
  //         (0x77: exponent field 14, mantissa 7: 1.875 * 128 = 240).
  std::vector<float> x(32, 0.0f);
  x[0] = 1.9f;
  x[1] = 1.0f;  // floor: 256 -> 0x78; rceil: 128 -> 0x70
  MxConfig cf;
  cf.elem = DType::e4m3;
  cf.rule = MxScaleRule::floor;
  auto f = mx_quantize(x, 1, 32, cf);
  CHECK(f.row->scales[0] == 119);
  CHECK(f.row->codes[0] == 0x7E);
  CHECK(f.row->codes[1] == 0x78);
  MxConfig cr = cf;
  cr.rule = MxScaleRule::rceil;
  auto r = mx_quantize(x, 1, 32, cr);
  CHECK(r.row->scales[0] == 120);
  CHECK(r.row->codes[0] == 0x77);
  CHECK(r.row->codes[1] == 0x70);
  // All-zero block: floor -> byte 0, rceil -> byte 0; elements 0.
  std::vector<float> z(32, 0.0f);
  CHECK(mx_quantize(z, 1, 32, cf).row->scales[0] == 0);
  CHECK(mx_quantize(z, 1, 32, cr).row->scales[0] == 0);
  // NaN in a block: floor (torch.amax propagates) -> 0xFF and NaN elements; rceil drops the NaN.
  std::vector<float> xn(32, 1.0f);
  xn[5] = NAN;
  auto fn = mx_quantize(xn, 1, 32, cf);
  CHECK(fn.row->scales[0] == 0xFF);
  CHECK(is_nan_code(DType::e4m3, fn.row->codes[0]));
  auto rn = mx_quantize(xn, 1, 32, cr);
  CHECK(rn.row->scales[0] == ue8m0_from_f32_rceil(1.0f * static_cast<float>(1.0 / 448.0)));
  CHECK(is_nan_code(DType::e4m3, rn.row->codes[5]));
  // RCEIL scale byte 0: a block of bf16 subnormals (amax 2^-130): fl(2^-130 * fl(1/448)) < 2^-127 ->
  // byte 0; spec multiplier 2^127 gives 2^-3 * ... non-zero codes, TE's exp2f_rcp(0) = 1 gives 0.
  std::vector<float> xs(32, 0.0f);
  xs[0] = 0x1.0p-130f;  // * 2^127 = 0.125 -> E4M3 exponent field 4 (2^(4-7)), mantissa 0: 4<<3 = 0x20
  xs[1] = -0x1.0p-131f;
  auto rs = mx_quantize(xs, 1, 32, cr);
  CHECK(rs.row->scales[0] == 0);
  CHECK(rs.row->codes[0] == 0x20);
  CHECK(rs.row->alt[0] == 0x00);
  CHECK(rs.row->alt[1] == 0x80);
  std::vector<uint8_t> te_like = {0x00, 0x80};
  te_like.resize(32, 0);
  CHECK_FALSE(compare_codes("q", rs.row->codes, nullptr, te_like, 1, 32, 1, 32, DType::e4m3, &rs.row->alt).has_value());
  CHECK(compare_codes("q", rs.row->codes, nullptr, te_like, 1, 32, 1, 32, DType::e4m3).has_value());
  // MXFP4: amax 6 -> floor(log2 6) - 2 = 0 -> byte 127; elements unscaled.
  MxConfig c4;
  c4.elem = DType::e2m1;
  std::vector<float> x4(32, 0.0f);
  x4[0] = 6.0f;
  x4[1] = 2.5f;   // tie -> 2 (code 4)
  x4[2] = -7.9f;  // -> saturates at 6: the floor rule lets |x/X| reach 8(1-eps)
  x4[3] = 7.9f;
  auto q4 = mx_quantize(x4, 1, 32, c4);
  CHECK(q4.row->scales[0] == 127 + 0);
  CHECK(q4.row->codes[0] == 7);
  CHECK(q4.row->codes[1] == 4);
  CHECK(q4.row->codes[2] == 15);
  CHECK(q4.row->packed[0] == (7 | (4 << 4)));
}

TEST_CASE("MX: kernel form vs tensor form for MXFP8 e4m3/e5m2 and MXFP4, both rules", "[cpu][L0]") {
  int64_t elems = 0;
  for (DType el : {DType::e4m3, DType::e5m2, DType::e2m1})
    for (MxScaleRule rule : {MxScaleRule::floor, MxScaleRule::rceil})
      for (int rep = 0; rep < 3; ++rep) {
        const int64_t M = rep == 0 ? 1 : 37, N = rep == 2 ? 100 : 64;
        auto x = bf16_matrix(M, N, 900 + rep * 11 + static_cast<int>(el), rep == 1 ? 1e-38 : 3.0);
        MxConfig cfg;
        cfg.elem = el;
        cfg.rule = rule;
        cfg.columnwise = true;
        auto a = mx_quantize(x, M, N, cfg);
        auto b = ref::mx_quantize(x, M, N, cfg);
        for (auto* p : {&a.row, &a.col}) (void)p;
        CHECK(a.row->scales == b.row->scales);
        CHECK(a.row->codes == b.row->codes);
        CHECK(a.col->scales == b.col->scales);
        CHECK(a.col->codes == b.col->codes);
        if (el == DType::e2m1) CHECK(a.row->packed == b.row->packed);
        elems += 2 * M * N;
      }
  WARN("MX forms: bit-identical scales/codes over " << elems << " elements");
}

// ================================================================================================
// FP8
// ================================================================================================

TEST_CASE("FP8 per-tensor / per-channel / DeepSeek blocks: forms agree; hand checks", "[cpu][L0]") {
  int64_t elems = 0;
  for (auto gran : {Fp8Granularity::per_tensor, Fp8Granularity::per_channel, Fp8Granularity::block_1x128,
                    Fp8Granularity::block_128x128})
    for (auto rec : {Fp8ScaleRecipe::te_current, Fp8ScaleRecipe::deepgemm})
      for (bool pow2 : {false, true})
        for (DType t : {DType::e4m3, DType::e5m2}) {
          const int64_t M = 130, N = 200;
          auto x = bf16_matrix(M, N, 77 + static_cast<int>(gran) * 5 + pow2);
          Fp8Config cfg;
          cfg.fp8 = t;
          cfg.gran = gran;
          cfg.recipe = rec;
          cfg.pow2_scale = pow2;
          auto a = fp8_quantize(x, M, N, cfg);
          auto b = ref::fp8_quantize(x, M, N, cfg);
          REQUIRE(a.scale.size() == b.scale.size());
          CHECK(a.codes == b.codes);
          CHECK(a.scale == b.scale);
          CHECK(a.scale_inv == b.scale_inv);
          elems += M * N;
          // power-of-two scales really are powers of two
          if (pow2)
            for (float s : a.scale_inv) {
              int e;
              CHECK(std::frexp(s, &e) == 0.5f);
            }
        }
  WARN("FP8 forms: bit-identical codes and scales over " << elems << " elements");
  // Hand check, TE per-tensor: amax 2 -> scale = 448/2 = 224, scale_inv = fl(1/224);
  // x = 1 -> 224 = 1.75 * 2^7 -> E4M3 exponent field 14, mantissa 6 -> 0x76.
  std::vector<float> x = {2.0f, 1.0f, -2.0f, 0.0f};
  Fp8Config cfg;
  auto r = fp8_quantize(x, 1, 4, cfg);
  CHECK(r.scale[0] == 224.0f);
  CHECK(r.codes[0] == 0x7E);
  CHECK(r.codes[1] == 0x76);
  CHECK(r.codes[2] == 0xFE);
  // Beyond max with a stale (smaller) amax: sat -> 448, nonsat -> NaN.
  cfg.amax_override = 1.0f;  // scale 448: x = 2 -> 896
  CHECK(fp8_quantize(x, 1, 4, cfg).codes[0] == 0x7E);
  cfg.overflow = Overflow::nonsat;
  CHECK(fp8_quantize(x, 1, 4, cfg).codes[0] == 0x7F);
  CHECK(ref::fp8_quantize(x, 1, 4, cfg).codes[0] == 0x7F);
  // DeepGEMM clamp: an all-zero 1x128 block has amax clamped to fl(1e-4), sf = 1e-4/448.
  std::vector<float> z(256, 0.0f);
  Fp8Config dg;
  dg.recipe = Fp8ScaleRecipe::deepgemm;
  dg.gran = Fp8Granularity::block_1x128;
  auto rz = fp8_quantize(z, 1, 256, dg);
  CHECK(rz.amax[0] == 1e-4f);
  CHECK(rz.scale_inv[0] == 1e-4f * (1.0f / 448.0f));
  // pow2 (ceil_to_ue8m0): sf = 1e-4 * fl(1/448) = 2.23e-7 -> 2^-22 (2.38e-7)
  dg.pow2_scale = true;
  CHECK(fp8_quantize(z, 1, 256, dg).scale_inv[0] == 0x1.0p-22f);
}

TEST_CASE("FP8 QAT fake-quant: forward = dequant(quant), STE backward", "[cpu][L0]") {
  const int64_t M = 8, N = 40;
  auto x = bf16_matrix(M, N, 555);
  std::vector<float> dy(M * N);
  Rng g(5);
  for (auto& v : dy) v = static_cast<float>(g.normalish());
  for (auto gran : {Fp8Granularity::per_tensor, Fp8Granularity::per_channel}) {
    Fp8Config cfg;
    cfg.gran = gran;
    auto f = fp8_fake_quant(x, dy, M, N, cfg);
    auto deq = fp8_dequantize(f.q, DType::e4m3);
    for (int64_t i = 0; i < M * N; ++i) {
      CHECK(f.y_exact[i] == deq[i]);
      CHECK(f.y[i] == static_cast<float>(deq[i]));  // the product of an fp8 value and an fp32 scale_inv
      CHECK(f.dx[i] == dy[i]);
      // round trip error <= half an fp8 ulp * scale_inv (RNE), relative 2^-4 for normal values
      if (std::fabs(x[i]) > 0) CHECK(std::fabs(f.y_exact[i] - x[i]) <= std::fabs(x[i]) * 0.0625 + 0x1.0p-9 * f.q.scale_inv[f.q.group_of(i / N, i % N)]);
    }
  }
  // Clipped STE with a stale scale: gradients vanish exactly where |x*scale| > 448.
  Fp8Config cfg;
  cfg.amax_override = 0.5f;
  auto f = fp8_fake_quant(x, dy, M, N, cfg, /*clipped_ste=*/true);
  int64_t clipped = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    const bool out = std::fabs(static_cast<double>(x[i] * f.q.scale[0])) > 448.0;
    CHECK(f.dx[i] == (out ? 0.0f : dy[i]));
    clipped += out;
  }
  CHECK(clipped > 0);
}

// ================================================================================================
// Swizzle
// ================================================================================================

TEST_CASE("scale swizzle 128x4: offset formula vs reshape/permute form; inverse; hand entries", "[cpu][L0]") {
  // Hand entries (A5), C = 8 padded columns: (0,0)->0, (0,1)->1, (1,0)->16, (32,0)->4, (96,3)->15,
  // (0,4)->512, (128,0)->(C/4)*512 = 1024, (31,0)->496.
  CHECK(swizzle_offset(0, 0, 8) == 0);
  CHECK(swizzle_offset(0, 1, 8) == 1);
  CHECK(swizzle_offset(1, 0, 8) == 16);
  CHECK(swizzle_offset(32, 0, 8) == 4);
  CHECK(swizzle_offset(96, 3, 8) == 15);
  CHECK(swizzle_offset(0, 4, 8) == 512);
  CHECK(swizzle_offset(128, 0, 8) == 1024);
  CHECK(swizzle_offset(31, 0, 8) == 496);
  Rng g(3);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {128, 4}, {130, 7}, {300, 13}, {77, 2}}) {
    std::vector<uint8_t> c(static_cast<size_t>(rows * cols));
    for (auto& v : c) v = static_cast<uint8_t>(g.next() | 1);  // non-zero so padding is visible
    auto a = swizzle_scales(c, rows, cols);
    auto b = ref::swizzle_scales_permute(c, rows, cols);
    CHECK(a == b);
    CHECK(unswizzle_scales(a, rows, cols) == c);
    const int64_t R = (rows + 127) / 128 * 128, C = (cols + 3) / 4 * 4;
    CHECK(static_cast<int64_t>(a.size()) == R * C);
    int64_t zeros = 0;
    for (auto v : a) zeros += v == 0;
    CHECK(zeros == R * C - rows * cols);  // padding written as 0, like torchao to_blocked
  }
}

// ================================================================================================
// GEMM
// ================================================================================================

TEST_CASE("block-scaled GEMM: integer-valued inputs exact; forms agree; fp32 bound holds", "[cpu][L0]") {
  // Integer-valued inputs: NVFP4 with A = 2688 in every tensor gives S_enc = 1, S_dec = 1; integer
  // values in {0, +-1..6}*q_s with q_s integral keep every product and partial sum an integer.
  const int64_t M = 20, N = 12, K = 80;
  Rng g(11);
  std::vector<float> a(M * K), b(N * K);
  for (auto& v : a) v = static_cast<float>(static_cast<int>(g.next() % 13) - 6);
  for (auto& v : b) v = static_cast<float>(static_cast<int>(g.next() % 13) - 6);
  // Operands with decoded values exactly the integers: elements = x, scales = 1 (V = 16).
  ScaledOperand oa{M, K, 16, std::vector<double>(a.begin(), a.end()), std::vector<double>(M * 5, 1.0)};
  ScaledOperand ob{N, K, 16, std::vector<double>(b.begin(), b.end()), std::vector<double>(N * 5, 1.0)};
  auto d1 = block_scaled_gemm(oa, ob);
  auto d2 = ref::block_scaled_gemm_eigen(oa, ob);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<int64_t>(a[m * K + k]) * static_cast<int64_t>(b[n * K + k]);
      REQUIRE(d1.d[m * N + n] == static_cast<double>(s));
      REQUIRE(d2.d[m * N + n] == static_cast<double>(s));
    }
  // Real NVFP4 operands: forms agree; a sequential fp32-FMA GEMM lies within the bound.
  auto xa = bf16_matrix(M, K, 21), xb = bf16_matrix(N, K, 22);
  Nvfp4Config cfg;
  auto qa = nvfp4_quantize(xa, M, K, cfg), qb = nvfp4_quantize(xb, N, K, cfg);
  auto A = operand_from_nvfp4(*qa.row), B = operand_from_nvfp4(*qb.row);
  const float alpha = nvfp4_gemm_alpha(1.0f, qa.row->amax, qb.row->amax);
  auto e1 = block_scaled_gemm(A, B, alpha);
  auto e2 = ref::block_scaled_gemm_eigen(A, B, alpha);
  double worst = 0, worst_ratio = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    worst = std::max(worst, std::fabs(e1.d[i] - e2.d[i]) / std::max(e1.bound[i], 1e-300));
    float acc = 0;
    const int64_t m = i / N, n = i % N;
    for (int64_t k = 0; k < K; ++k)
      acc = std::fma(static_cast<float>(A.elem[m * K + k] * A.scale[m * 5 + k / 16]),
                     static_cast<float>(B.elem[n * K + k] * B.scale[n * 5 + k / 16]), acc);
    const double got = static_cast<double>(acc) * alpha;
    const double tol = gemm_fp32_error_bound(K, e1.bound[i], e1.d[i], DType::f32);
    worst_ratio = std::max(worst_ratio, std::fabs(got - e1.d[i]) / tol);
  }
  WARN("GEMM forms (sequential vs Eigen) worst |diff|/bound = " << worst
       << "; fp32-FMA emulation worst error / bound = " << worst_ratio);
  CHECK(worst <= 1e-15);
  CHECK(worst_ratio <= 1.0);
  // NVFP4 alpha (A3.2): with A_a = A_b = 2688, alpha' = fl(fl(2688*2688) * fl(1/7225344)) ~ 1.
  CHECK(std::fabs(nvfp4_gemm_alpha(1.0f, 2688.0f, 2688.0f) - 1.0f) <= 1e-7f);
  // The GEMM value equals the product of exactly dequantized operands (alpha from the global scales).
  auto da = nvfp4_dequantize_exact(*qa.row), db = nvfp4_dequantize_exact(*qb.row);
  double s = 0;
  for (int64_t k = 0; k < K; ++k) s += da[k] * db[k];
  CHECK(std::fabs(s - e1.d[0]) <= 1e-5 * e1.bound[0] + 1e-300);
}

TEST_CASE("block-scaled GEMM with MXFP8, MXFP4 and DeepSeek FP8 operands", "[cpu][L0]") {
  const int64_t M = 40, N = 24, K = 160;
  auto xa = bf16_matrix(M, K, 61), xb = bf16_matrix(N, K, 62);
  double worst = 0;
  auto check = [&](const ScaledOperand& A, const ScaledOperand& B, const std::vector<double>& da,
                   const std::vector<double>& db) {
    auto g = block_scaled_gemm(A, B);
    auto e = ref::block_scaled_gemm_eigen(A, B);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        // against the exactly dequantized operands (fp64 dot product)
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += da[m * K + k] * db[n * K + k];
        const int64_t i = m * N + n;
        worst = std::max(worst, std::fabs(g.d[i] - s) / std::max(g.bound[i], 1e-300));
        worst = std::max(worst, std::fabs(g.d[i] - e.d[i]) / std::max(g.bound[i], 1e-300));
      }
  };
  for (DType el : {DType::e4m3, DType::e5m2, DType::e2m1}) {
    MxConfig cfg;
    cfg.elem = el;
    cfg.rule = MxScaleRule::rceil;
    auto qa = mx_quantize(xa, M, K, cfg), qb = mx_quantize(xb, N, K, cfg);
    check(operand_from_mx(*qa.row, el), operand_from_mx(*qb.row, el), mx_dequantize(*qa.row, el),
          mx_dequantize(*qb.row, el));
  }
  Fp8Config act;
  act.recipe = Fp8ScaleRecipe::deepgemm;
  act.gran = Fp8Granularity::block_1x128;
  Fp8Config wgt = act;
  wgt.gran = Fp8Granularity::block_128x128;
  auto qa = fp8_quantize(xa, M, K, act), qb = fp8_quantize(xb, N, K, wgt);
  check(operand_from_fp8(qa, DType::e4m3), operand_from_fp8(qb, DType::e4m3), fp8_dequantize(qa, DType::e4m3),
        fp8_dequantize(qb, DType::e4m3));
  WARN("MX / DeepSeek GEMM: worst |d - exact dequant dot| / bound = " << worst);
  CHECK(worst <= 1e-15);
}

// ================================================================================================
// Mutants: the comparison must reject each one (and accept the value-equivalent q_s = 0 variant).
// ================================================================================================

TEST_CASE("mutants are rejected, with the first bad block named", "[cpu][L0]") {
  const int64_t M = 32, N = 64;
  auto x = bf16_matrix(M, N, 2024);
  Nvfp4Config cfg;
  auto good = nvfp4_quantize(x, M, N, cfg);
  const auto& gd = *good.row;
  auto run = [&](Mutant m) {
    Nvfp4Config c = cfg;
    c.mutant = m;
    return nvfp4_quantize(x, M, N, c);
  };
  SECTION("nibble swap") {
    auto bad = run(Mutant::nibble_swap);
    CHECK(bad.row->packed != gd.packed);
    auto un = unpack_e2m1(bad.row->packed, M, N);
    auto mm = compare_codes("codes", gd.codes, &gd.allowed, un, M, N, 1, 16);
    REQUIRE(mm.has_value());
    WARN(mm->message);
  }
  SECTION("ties away from zero") {
    // Fixture with exact E2M1 midpoints: A = 2688 -> S_enc = 1; block amax 448*6 -> q_s = 448,
    // r = fl(1/448); x = 448 * {0.25, 0.75, 2.5, 5} are exact ties after the multiply? r is inexact,
    // so use S_dec-free midpoints: pick block amax = 6 * 2^k style values with q_s a power of two:
    // block amax 12 in a tensor with A = 2688: s = 12 * fl(1/6) = 2.0000000596 -> fl = 2 (ulp 2.4e-7) ->
    // q_s = 2, r = fl(1/(2 * S_dec)) = 0.5 exactly (S_dec = 1). x = 2.5*2 = 5 -> y = 2.5 (tie -> 2).
    std::vector<float> t(32, 0.0f);
    t[0] = 2688;
    t[16] = 12;
    t[17] = 5;    // y = 2.5: RNE -> 2 (code 4), away -> 3 (code 5)
    t[18] = 0.5f; // y = 0.25: RNE -> 0, away -> 0.5
    t[19] = 10;   // y = 5: RNE -> 4, away -> 6
    auto g2 = nvfp4_quantize(t, 1, 32, cfg);
    REQUIRE(g2.row->scales[1] == static_cast<uint8_t>(encode(DType::e4m3, 2.0)));
    CHECK(g2.row->codes[17] == 4);
    CHECK(g2.row->codes[18] == 0);
    CHECK(g2.row->codes[19] == 6);
    Nvfp4Config c = cfg;
    c.mutant = Mutant::e2m1_ties_away;
    auto b2 = nvfp4_quantize(t, 1, 32, c);
    auto mm = compare_codes("codes", g2.row->codes, &g2.row->allowed, b2.row->codes, 1, 32, 1, 16);
    REQUIRE(mm.has_value());
    CHECK(mm->block_col == 1);
    CHECK(mm->first_col == 17);
    WARN(mm->message);
  }
  SECTION("missing global scale") {
    auto bad = run(Mutant::no_global_scale);
    auto mm = compare_codes("scales", gd.scales, nullptr, bad.row->scales, M, gd.scale_cols(), 1, 1, DType::e4m3);
    REQUIRE(mm.has_value());
    WARN(mm->message);
  }
  SECTION("1/6 not folded first: a fixture where the bits differ") {
    // Search bf16 block amaxes a_b (with a fixed tensor amax A) for which
    // E4M3(fl(a_b * fl(S_enc * fl(1/6)))) != E4M3(fl(fl(a_b / 6) * S_enc)).
    int found = 0;
    float wa = 0, wb = 0;
    for (uint32_t abits = 0x3F80; abits < 0x4500 && !found; ++abits) {  // bf16 A in [1, 2048)
      const float A = f32_bits(abits << 16);
      const float se = nvfp4_global_encode_scale(A), t = se * (1.0f / 6.0f);
      for (uint32_t bb = abits; bb > 0x3000; --bb) {  // a_b <= A, largest first (normal q_s)
        const float ab = f32_bits(bb << 16);
        const float s1 = ab * t, s2 = (ab / 6.0f) * se;
        if (encode_f32(DType::e4m3, s1, Overflow::satfinite) != encode_f32(DType::e4m3, s2, Overflow::satfinite)) {
          wa = A;
          wb = ab;
          found = 1;
          break;
        }
      }
    }
    REQUIRE(found);
    WARN("1/6-folding witness: tensor amax A = " << wa << " (bf16), block amax a_b = " << wb);
    std::vector<float> t(32, 0.0f);
    t[0] = wa;
    t[16] = wb;
    t[17] = wb * 0.5f;
    auto g2 = nvfp4_quantize(t, 1, 32, cfg);
    Nvfp4Config c = cfg;
    c.mutant = Mutant::sixth_not_folded;
    auto b2 = nvfp4_quantize(t, 1, 32, c);
    auto mm = compare_codes("scales", g2.row->scales, nullptr, b2.row->scales, 1, 2, 1, 1, DType::e4m3);
    REQUIRE(mm.has_value());
    CHECK(mm->block_col == 1);
    WARN(mm->message);
    auto r2 = ref::nvfp4_quantize(t, 1, 32, cfg);
    CHECK(r2.row->scales == g2.row->scales);  // the tensor form agrees with the kernel form
  }
  SECTION("MX floor instead of RCEIL") {
    auto xm = bf16_matrix(4, 64, 8);
    MxConfig mc;
    mc.rule = MxScaleRule::rceil;
    auto gm = mx_quantize(xm, 4, 64, mc);
    mc.mutant = Mutant::mx_floor_for_rceil;
    auto bm = mx_quantize(xm, 4, 64, mc);
    auto mm = compare_codes("scales", gm.row->scales, nullptr, bm.row->scales, 4, 2, 1, 1, DType::ue8m0);
    REQUIRE(mm.has_value());
    WARN(mm->message);
  }
  SECTION("value-equivalent q_s = 0 variant is accepted") {
    auto alt = run(Mutant::qs_zero_encode_zero);
    CHECK_FALSE(compare_codes("codes", gd.codes, &gd.allowed, alt.row->codes, M, N, 1, 16).has_value());
  }
}

TEST_CASE("golden builders: both forms agree on every output tensor", "[cpu][L0]") {
  auto x = bf16_matrix(64, 48, 321);
  Nvfp4Config cfg;
  cfg.columnwise = true;
  cfg.rht = true;
  auto r = nvfp4_oracle(x, 64, 48, cfg);
  CHECK(r.outputs.size() == 10);  // q, scale, amax, packed, xhat per direction
  for (const auto& a : r.agreement) {
    INFO(a.tensor);
    CHECK(a.max_rel == 0.0);
  }
  for (auto el : {DType::e4m3, DType::e2m1}) {
    MxConfig mc;
    mc.elem = el;
    mc.columnwise = true;
    for (const auto& a : mx_oracle(x, 64, 48, mc).agreement) CHECK(a.max_rel == 0.0);
  }
  Fp8Config fc;
  fc.gran = Fp8Granularity::block_1x128;
  fc.recipe = Fp8ScaleRecipe::deepgemm;
  for (const auto& a : fp8_oracle(x, 64, 48, fc).agreement) CHECK(a.max_rel == 0.0);
  std::vector<float> dy(64 * 48, 1.0f);
  fc = Fp8Config{};
  for (const auto& a : fp8_fake_quant_oracle(x, dy, 64, 48, fc, true).agreement) CHECK(a.max_rel == 0.0);
  auto q = nvfp4_quantize(x, 64, 48, Nvfp4Config{});
  auto op = operand_from_nvfp4(*q.row);
  auto g = gemm_oracle(op, op, 1.0, DType::f32);
  CHECK(g.agreement[0].max_rel <= 1e-14);
  auto s = swizzle_oracle(q.row->scales, 64, 3);
  CHECK(s.outputs[0].expected.data.size() == 128 * 4);
}

// ================================================================================================
// Benchmark (hidden: run with `test_quant "[bench]"`)
// ================================================================================================
TEST_CASE("NVFP4 quantization throughput", "[.][bench]") {
  const int64_t M = 1024, N = 4096;
  auto x = bf16_matrix(M, N, 1);
  Nvfp4Config cfg;
  cfg.columnwise = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = nvfp4_quantize(x, M, N, cfg);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("NVFP4 TE rowwise+columnwise: " << (2.0 * M * N / s) / 1e6 << " M elements/s (" << s << " s for "
                                       << 2 * M * N << " element-quantizations, OpenMP over rows)");
  CHECK(r.row->codes.size() == static_cast<size_t>(M * N));
}
