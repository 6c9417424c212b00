// Tests of the MX, FP8 (scaling, fake-quant), scale-swizzle and block-scaled GEMM oracles
// (reference/quant). Expected values are either derived by hand in a comment or come from the
// independently built form (quant::ref); agreement figures are printed (WARN).
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "catch_compat.h"
#include "reference/core/dtype.h"
#include "reference/quant/quant.h"
#include "reference/quant/tests/quant_test_util.h"

using namespace assay;
using namespace assay::quant;
using namespace quant_test;

// ================================================================================================
// MX
// ================================================================================================

TEST_CASE("MX: hand-derived floor vs RCEIL blocks", "[cpu][L0]") {
  // MXFP8 E4M3, block amax 1.9 (fp32 1.89999998):
  //  floor: floor(log2 1.9) - 8 = -8 -> byte 119; 1.9 * 2^8 = 486.4 > 464 -> saturates to 448 (0x7E).
  //  rceil: fl(1.9 * fl(1/448)) = 0.00424 -> ceil(log2) = -7 -> byte 120; 1.9 * 2^7 = 243.2 -> 240
  //         (0x77: exponent field 14, mantissa 7: 1.875 * 128 = 240).
  auto x = row_of(32, {{0, 1.9f},
                       {1, 1.0f}});  // floor: 256 -> 0x78; rceil: 128 -> 0x70
  auto cf = mx_config(DType::e4m3, MxScaleRule::floor);
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
  auto xs = row_of(32, {{0, 0x1.0p-130f},  // * 2^127 = 0.125 -> E4M3 exponent field 4 (2^(4-7)), mantissa 0: 4<<3 = 0x20
                        {1, -0x1.0p-131f}});
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
  auto x4 = row_of(32, {{0, 6.0f},
                        {1, 2.5f},  // tie -> 2 (code 4)
                        {2, -7.9f},  // -> saturates at 6: the floor rule lets |x/X| reach 8(1-eps)
                        {3, 7.9f}});
  auto q4 = mx_quantize(x4, 1, 32, c4);
  CHECK(q4.row->scales[0] == 127 + 0);
  check_at(q4.row->codes, {{0, 7}, {1, 4}, {2, 15}});
  CHECK(q4.row->packed[0] == (7 | (4 << 4)));
}

TEST_CASE("MX: kernel form vs tensor form for MXFP8 e4m3/e5m2 and MXFP4, both rules", "[cpu][L0]") {
  int64_t elems = 0;
  for (DType el : {DType::e4m3, DType::e5m2, DType::e2m1})
    for (MxScaleRule rule : {MxScaleRule::floor, MxScaleRule::rceil})
      for (int rep = 0; rep < 3; ++rep) {
        const int64_t M = rep == 0 ? 1 : 37, N = rep == 2 ? 100 : 64;
        auto x = bf16_matrix(M, N, 900 + rep * 11 + static_cast<int>(el), rep == 1 ? 1e-38 : 3.0);
        auto cfg = mx_config(el, rule, true);
        auto [a, b] = both_forms(x, M, N, cfg);
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

TEST_CASE("FP8 per-tensor / per-channel / DeepSeek blocks: forms agree, hand checks", "[cpu][L0]") {
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
          auto [a, b] = both_forms(x, M, N, cfg);
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
  check_at(r.codes, {{0, 0x7E}, {1, 0x76}, {2, 0xFE}});
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

TEST_CASE("scale swizzle 128x4: offset formula vs reshape/permute form, inverse, hand entries", "[cpu][L0]") {
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

TEST_CASE("block-scaled GEMM: integer-valued inputs exact, forms agree, fp32 bound holds", "[cpu][L0]") {
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
  // Two fp64 sums of the same K products in different orders: within 2 gamma_K of each other,
  // relative to bound = |alpha| sum |a b| (see the MX test below).
  const double u = 0x1p-53, gamma_k = K * u / (1 - K * u);
  CHECK(worst <= 2 * gamma_k);
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
    auto cfg = mx_config(el, MxScaleRule::rceil);
    auto qa = mx_quantize(xa, M, K, cfg), qb = mx_quantize(xb, N, K, cfg);
    check(operand_from_mx(*qa.row, el), operand_from_mx(*qb.row, el), mx_dequantize(*qa.row, el),
          mx_dequantize(*qb.row, el));
  }
  auto qa = fp8_quantize(xa, M, K, deepseek_fp8_config(false)), qb = fp8_quantize(xb, N, K, deepseek_fp8_config(true));
  check(operand_from_fp8(qa, DType::e4m3), operand_from_fp8(qb, DType::e4m3), fp8_dequantize(qa, DType::e4m3),
        fp8_dequantize(qb, DType::e4m3));
  WARN("MX / DeepSeek GEMM: worst |d - exact dequant dot| / bound = " << worst);
  // Two fp64 sums of the same K products in different orders (the oracle's blocks, Eigen's or its
  // BLAS's kernel, this loop) each lie within gamma_K = K u / (1 - K u) of the exact dot, relative to
  // bound = sum |a b|: so they differ by at most 2 gamma_K (3.6e-14 at K = 160). 1e-15 held on one
  // machine and not on another (1.18e-15: OpenBLAS picks its kernel at run time).
  const double u = 0x1p-53, gamma_k = K * u / (1 - K * u);
  CHECK(worst <= 2 * gamma_k);
}
