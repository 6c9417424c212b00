// The online form's tile kernels (reference/attention/attention_tiles.h): every ISA body gives the
// bits of a std::fma chain, the form's own exp is the same on every ISA and within 1 ulp of
// std::exp; and a hidden benchmark of form (b) against an Eigen fp64 GEMM ("[.bench]"). Tensors:
// the tile operands of attention_tiles.h (fp64).
#include <chrono>
#include <cstring>

#include <Eigen/Dense>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "reference/attention/attention.h"
#include "reference/attention/attention_tiles.h"
#include "reference/attention/tests/attention_test_util.h"

using namespace assay::attention;
using namespace attention_test;
using assay::agreement_rel;

TEST_CASE("tile kernels: every ISA body gives the bits of a std::fma chain", "[cpu][L0]") {
  // Shapes that exercise the register tiles' remainders (rows not a multiple of 4, panels not a
  // multiple of 4, D and jn odd), the values with mixed signs and magnitudes.
  using assay::SimdIsa;
  Rng rng(77);
  for (const auto [tm, D, npan, jn] : std::vector<std::array<int64_t, 4>>{{7, 5, 3, 21}, {64, 128, 8, 64}, {1, 1, 1, 1}, {13, 33, 5, 37}}) {
    const int64_t ldq = D + 3, lds = npan * 8 + 2, ldv = npan * 8 + 1, nvec = npan, lda = nvec * 8 + 4;
    const int64_t ps = D * 8 + 8;
    std::vector<double> q(tm * ldq), kp(npan * ps), p(tm * lds), vr(jn * ldv), acc0(tm * lda);
    for (auto* v : {&q, &kp, &p, &vr, &acc0})
      for (auto& x : *v) x = rng.uni() * std::exp2(std::floor(rng.uni(-20, 20)));
    const double scale = 0.0883883476483184;
    // Definition: one fma chain from 0 per element, then the scale / the add to acc.
    std::vector<double> alpha(tm);  // O's rescale factors (0 and 1 among them)
    for (int64_t r = 0; r < tm; ++r) alpha[r] = r % 5 == 0 ? 1.0 : r % 7 == 3 ? 0.0 : rng.uni();
    std::vector<double> s_ref(tm * lds, 0.0), acc_ref = acc0, acc_ref1 = acc0;
    for (int64_t r = 0; r < tm; ++r)
      for (int64_t c = 0; c < npan * 8; ++c) {
        double a = 0;
        for (int64_t d = 0; d < D; ++d) a = std::fma(q[r * ldq + d], kp[(c / 8) * ps + d * 8 + c % 8], a);
        s_ref[r * lds + c] = a * scale;
      }
    for (int64_t r = 0; r < tm; ++r)
      for (int64_t e = 0; e < nvec * 8; ++e) {
        double a = 0;
        for (int64_t c = 0; c < jn; ++c) a = std::fma(p[r * lds + c], vr[c * ldv + e], a);
        acc_ref[r * lda + e] += a;
        acc_ref1[r * lda + e] = acc_ref1[r * lda + e] * alpha[r] + a;  // (-ffp-contract=off: two roundings)
      }
    int checked = 0;
    for (const auto isa : {SimdIsa::avx512, SimdIsa::avx2, SimdIsa::portable}) {
      if (!assay::simd_isa_available(isa)) continue;
      std::vector<double> s(tm * lds, 0.0), acc = acc0, acc1 = acc0;
      assay::attention::detail::tile_scores(q.data(), ldq, tm, D, kp.data(), npan, ps, scale, s.data(), lds, isa);
      assay::attention::detail::tile_pv(p.data(), lds, tm, jn, vr.data(), ldv, nvec, acc.data(), lda, nullptr, isa);
      assay::attention::detail::tile_pv(p.data(), lds, tm, jn, vr.data(), ldv, nvec, acc1.data(), lda, alpha.data(), isa);
      for (int64_t r = 0; r < tm; ++r)
        for (int64_t c = 0; c < npan * 8; ++c) REQUIRE(s[r * lds + c] == s_ref[r * lds + c]);
      for (int64_t r = 0; r < tm; ++r)
        for (int64_t e = 0; e < lda; ++e) {
          const bool pad = e >= nvec * 8;  // (past the columns: untouched)
          REQUIRE(acc[r * lda + e] == (pad ? acc0[r * lda + e] : acc_ref[r * lda + e]));
          REQUIRE(acc1[r * lda + e] == (pad ? acc0[r * lda + e] : acc_ref1[r * lda + e]));
        }
      ++checked;
    }
    CHECK(checked >= 1);
  }
}

TEST_CASE("tile exp: every ISA body gives the same bits, within 1 ulp of std::exp", "[cpu][L0]") {
  using assay::SimdIsa;
  // 2^20 arguments in [-746, 0] (the subnormal range below -708 included), then the edges: 0, -0,
  // -inf, -746 and below, the smallest normal and subnormal results.
  const int64_t n = (int64_t{1} << 20) + 9;
  std::vector<double> x(n);
  Rng rng(5);
  for (int64_t i = 0; i + 9 < n; ++i) x[i] = i % 4 == 0 ? rng.uni(-746, -700) : rng.uni(-746, 0);
  const double edges[9] = {0.0, -0.0, kNegInf, -746.0, -800.0, -708.3964185322641, -744.4400719213812,
                           -1e-300, -0.34657359027997264};
  std::copy(edges, edges + 9, x.end() - 9);
  std::vector<double> ref;
  double ref_sum = 0;
  int checked = 0;
  for (const auto isa : {SimdIsa::portable, SimdIsa::avx2, SimdIsa::avx512}) {
    if (!assay::simd_isa_available(isa)) continue;
    for (const int64_t len : {n, int64_t{37}, int64_t{1}}) {  // full steps and padded tails
      std::vector<double> y(len);
      const double sum = assay::attention::detail::tile_exp_row_sum(x.data(), 0.0, y.data(), len, isa);
      if (len == n && ref.empty()) ref = y, ref_sum = sum;
      if (len == n) {
        REQUIRE(sum == ref_sum);
        for (int64_t i = 0; i < n; ++i) REQUIRE(std::memcmp(&y[i], &ref[i], sizeof(double)) == 0);
      } else {
        for (int64_t i = 0; i < len; ++i) REQUIRE(y[i] == ref[i]);
      }
    }
    ++checked;
  }
  REQUIRE(checked >= 1);
  double worst_ulp = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::exp(x[i]);
    if (e == 0) {
      REQUIRE(ref[i] <= std::numeric_limits<double>::denorm_min());
      continue;
    }
    const double ulp = std::nextafter(e, 1.0) - e;  // the spacing at e (subnormal spacing below 2^-1022)
    worst_ulp = std::max(worst_ulp, std::fabs(ref[i] - e) / ulp);
  }
  std::printf("[attention] tile exp: worst %.3f ulp vs std::exp over %lld arguments\n", worst_ulp, (long long)n);
  CHECK(worst_ulp <= 1.0);
  CHECK(ref[n - 7] == 0.0);  // -inf
  CHECK(ref[n - 9] == 1.0);  // exp(0)
}

TEST_CASE("benchmark: form (b) vs Eigen fp64 GEMM", "[.bench]") {
  using clk = std::chrono::steady_clock;
  auto secs = [](clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const char* env = std::getenv("ASSAY_ATTN_BENCH_S");
  const int64_t S = env ? std::atoll(env) : 4096;
  // GEMM rate: best of 3 square products, n = 2048 (17.2 GFLOP each).
  const int64_t n = 2048;
  Eigen::MatrixXd A = Eigen::MatrixXd::Random(n, n), Bm = Eigen::MatrixXd::Random(n, n), C(n, n);
  double gemm_best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = clk::now();
    C.noalias() = A * Bm;
    gemm_best = std::min(gemm_best, secs(t0, clk::now()));
  }
  const double gemm_rate = 2.0 * n * n * n / gemm_best / 1e9;
  REQUIRE(std::isfinite(C.sum()));

  Params p = dense(1, S, S, 8, 8, 128, 128);
  const auto in = make_inputs(p, 1);
  const double flops = 4.0 * p.B * p.Hq * double(S) * double(S) * p.D;
  double best_rate = 0;
  int64_t best_m = 0, best_n = 0;
  for (auto [tm, tn] : std::vector<std::pair<int64_t, int64_t>>{{128, 128}, {128, 256}}) {
    p.tile_m = tm, p.tile_n = tn;
    const auto t0 = clk::now();
    const auto r = forward_online(p, in.q, in.k, in.v, in.sink);
    const double t = secs(t0, clk::now());
    REQUIRE(std::isfinite(r.o[0]));
    const double rate = flops / t / 1e9;
    std::printf("[attention] bench form (b) tile_m=%lld tile_n=%lld: %.3f s, %.2f GFLOP/s\n",
                (long long)tm, (long long)tn, t, rate);
    if (rate > best_rate) best_rate = rate, best_m = tm, best_n = tn;
  }
  std::printf("[attention] bench: threads %d; Eigen fp64 GEMM (n=%lld) %.2f GFLOP/s; form (b) best "
              "%.2f GFLOP/s (tile_m=%lld, tile_n=%lld) = %.1f %% of GEMM\n",
              omp_get_max_threads(), (long long)n, gemm_rate, best_rate, (long long)best_m,
              (long long)best_n, 100 * best_rate / gemm_rate);
  CHECK(best_rate >= 0.5 * gemm_rate);
}
