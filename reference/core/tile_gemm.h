// Small dense products as FMA register-tile kernels, for the oracle forms that work on chunk-sized
// blocks (reference/gated_delta's chunked form): no packing, no BLAS, and one rounding rule that
// does not depend on the CPU, the ISA body or how the product is tiled.
//
//   a  [M, K]  fp64, element (i, k) at a[i ars + k acs] (any strides: a transposed operand is free)
//   b  [K, N]  fp64, row-major, rows ldb apart
//   c  [M, N]  fp64, row-major, rows ldc apart (out; in as well with accumulate)
//
// Rounding: every c[i][j] is one fused multiply-add chain over k = 0, 1, ... kend(i) - 1,
//   acc = accumulate ? c[i][j] : 0;   acc = fma(sign a(i, k), b[k][j], acc);   c[i][j] = acc,
// sign = -1 with negate (exact), kend(i) = a_lower ? min(K, i + 1) : K (a lower triangular, the
// diagonal included: the terms above it, products with zeros, are skipped). With c_lower only the
// elements j <= i are computed; the others are left unspecified (the caller masks them). The
// AVX-512, AVX2 + FMA and portable (std::fma) bodies give the same bits (test_core checks them
// against a scalar chain).
#pragma once
#include <cstdint>

#include "reference/core/simd_isa.h"

namespace assay {

struct GemmOpts {
  bool accumulate = false;  // chain starts from c (else from 0)
  bool negate = false;      // c -= a b
  bool a_lower = false;     // a(i, k) = 0 for k > i: skipped
  bool c_lower = false;     // only c[i][j], j <= i, is needed
};

void tile_gemm(int64_t M, int64_t N, int64_t K, const double* a, int64_t ars, int64_t acs, const double* b,
               int64_t ldb, double* c, int64_t ldc, GemmOpts o = {}, SimdIsa isa = SimdIsa::best);

}  // namespace assay
