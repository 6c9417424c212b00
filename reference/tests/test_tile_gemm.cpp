#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "catch_compat.h"
#include "reference/core/tile_gemm.h"

using namespace assay;

TEST_CASE("tile_gemm: every ISA body gives the bits of the defining std::fma chain", "[cpu][L0]") {
  // Shapes with every remainder (rows not a multiple of the register tile, columns not a multiple
  // of 8 or 32, K odd, K < M for the triangular skip), strided and transposed a, every option.
  std::mt19937_64 gen(20261126);
  std::uniform_real_distribution<double> u(-1.0, 1.0), e(-20.0, 20.0);
  int checked = 0, bodies = 0;
  for (const auto [M, N, K] : std::vector<std::array<int64_t, 3>>{
           {64, 64, 128}, {64, 128, 64}, {7, 5, 3}, {13, 37, 33}, {1, 1, 1}, {33, 71, 17}, {64, 64, 64}, {5, 40, 9}}) {
    for (int opt = 0; opt < 32; ++opt) {
      const GemmOpts o{(opt & 1) != 0, (opt & 2) != 0, (opt & 4) != 0, (opt & 8) != 0};
      const bool a_t = (opt & 16) != 0;  // a read transposed: a(i, k) = at[k][i]
      const int64_t lda = (a_t ? M : K) + 3, ldb = N + 5, ldc = N + 2;
      std::vector<double> a((a_t ? K : M) * lda), b(K * ldb), c0(M * ldc);
      for (auto* v : {&a, &b, &c0})
        for (auto& x : *v) x = u(gen) * std::exp2(std::floor(e(gen)));
      const int64_t ars = a_t ? 1 : lda, acs = a_t ? lda : 1;
      auto ref = c0;  // the definition, element by element
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = o.accumulate ? c0[i * ldc + j] : 0.0;
          const int64_t kend = o.a_lower ? std::min(K, i + 1) : K;
          for (int64_t k = 0; k < kend; ++k) acc = std::fma((o.negate ? -1.0 : 1.0) * a[i * ars + k * acs], b[k * ldb + j], acc);
          ref[i * ldc + j] = acc;
        }
      for (const auto isa : {SimdIsa::avx512, SimdIsa::avx2, SimdIsa::portable, SimdIsa::best}) {
        if (!simd_isa_available(isa)) continue;
        auto c = c0;
        tile_gemm(M, N, K, a.data(), ars, acs, b.data(), ldb, c.data(), ldc, o, isa);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            if (j >= N) {  // padding untouched
              REQUIRE(std::memcmp(&c[i * ldc + j], &c0[i * ldc + j], sizeof(double)) == 0);
              continue;
            }
            if (o.c_lower && j > i) continue;  // unspecified
            INFO("M=" << M << " N=" << N << " K=" << K << " opt=" << opt << " isa=" << static_cast<int>(isa)
                      << " i=" << i << " j=" << j);
            REQUIRE(std::memcmp(&c[i * ldc + j], &ref[i * ldc + j], sizeof(double)) == 0);
          }
        ++checked;
      }
    }
  }
  for (const auto isa : {SimdIsa::avx512, SimdIsa::avx2, SimdIsa::portable}) bodies += simd_isa_available(isa);
  CHECK(bodies >= 1);
  CHECK(checked == 8 * 32 * (bodies + 1));
}
