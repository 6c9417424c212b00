// Kernel form of the quantization oracles (see quant.h): the codecs, the exact-sum bf16 rounding
// of the RHT, NVFP4 and compare_codes (MX and FP8: quant_mx_fp8.cpp; swizzle and the block-scaled
// GEMM: quant_gemm.cpp). fp32 arithmetic is plain C++ float arithmetic (SSE2, -ffp-contract=off):
// every `a * b` / `a / b` on floats is one IEEE rounding.
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

std::string mutant_name(Mutant m) {
  switch (m) {
    case Mutant::none: return "none";
    case Mutant::nibble_swap: return "nibble_swap";
    case Mutant::e2m1_ties_away: return "e2m1_ties_away";
    case Mutant::no_global_scale: return "no_global_scale";
    case Mutant::sixth_not_folded: return "sixth_not_folded";
    case Mutant::mx_floor_for_rceil: return "mx_floor_for_rceil";
    case Mutant::mx_nan_as_inf: return "mx_nan_as_inf";
    case Mutant::qs_zero_encode_zero: return "qs_zero_encode_zero";
  }
  return "?";
}

double e2m1_value(uint8_t code) {
  double v = kE2M1[code & 7];
  return (code & 8) ? -v : v;
}

uint8_t e2m1_rn(float y) { return static_cast<uint8_t>(encode_f32(DType::e2m1, y, Overflow::satfinite)); }

uint8_t e2m1_sr(float y, uint8_t rbits) {
  if (std::isnan(y)) return 7;  // NaN -> +MAX_NORM (TE fallback)
  const float a = std::fabs(y);
  const float u = static_cast<float>(rbits) * (1.0f / 256.0f);  // exact
  auto step_of = [](float v) { return v < 2.0f ? 0.5f : (v < 4.0f ? 1.0f : 2.0f); };
  const float step = step_of(a);
  const float t = std::fma(u, step, a);
  const float st = step_of(t);
  float q = std::floor(t / st) * st;  // t/st: division by a power of two, exact
  q = std::fmin(q, 6.0f);
  // q is on the grid; encode it exactly (sign restored).
  uint8_t idx = 0;
  for (uint8_t i = 0; i < 8; ++i)
    if (kE2M1[i] == static_cast<double>(q)) idx = i;
  return static_cast<uint8_t>(idx | (std::signbit(y) ? 8 : 0));
}

std::vector<uint8_t> pack_e2m1(const std::vector<uint8_t>& codes, int64_t rows, int64_t cols) {
  ASSAY_CHECK(static_cast<int64_t>(codes.size()) == rows * cols, "pack_e2m1 size");
  const int64_t pc = (cols + 1) / 2;
  std::vector<uint8_t> out(static_cast<size_t>(rows * pc), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      uint8_t v = codes[r * cols + c] & 0xF;
      out[r * pc + c / 2] |= static_cast<uint8_t>((c % 2 == 0) ? v : (v << 4));
    }
  return out;
}

std::vector<uint8_t> unpack_e2m1(const std::vector<uint8_t>& packed, int64_t rows, int64_t cols) {
  const int64_t pc = (cols + 1) / 2;
  ASSAY_CHECK(static_cast<int64_t>(packed.size()) == rows * pc, "unpack_e2m1 size");
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      uint8_t b = packed[r * pc + c / 2];
      out[r * cols + c] = (c % 2 == 0) ? (b & 0xF) : (b >> 4);
    }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Exact sum -> bf16 (RHT)
// ------------------------------------------------------------------------------------------------
namespace {

// Shewchuk's GROW-EXPANSION with TwoSum: exact, nonoverlapping, increasing magnitude (zeros removed).
void grow(std::vector<double>& e, double b) {
  std::vector<double> h;
  h.reserve(e.size() + 1);
  double q = b;
  for (double ei : e) {
    double x = q + ei;
    double bv = x - q;
    double av = x - bv;
    double err = (q - av) + (ei - bv);
    if (err != 0) h.push_back(err);
    q = x;
  }
  if (q != 0 || h.empty()) h.push_back(q);
  e.swap(h);
}

// Sign of the exact value of a nonoverlapping expansion = sign of its largest-magnitude nonzero term.
int expansion_sign(const std::vector<double>& e) {
  for (size_t i = e.size(); i-- > 0;)
    if (e[i] != 0) return e[i] > 0 ? 1 : -1;
  return 0;
}

// bf16 grid walking through a monotone integer key.
int32_t bf16_key(uint16_t b) { return (b & 0x8000) ? -static_cast<int32_t>(b & 0x7FFF) : (b & 0x7FFF); }
uint16_t bf16_from_key(int32_t k) {
  return k < 0 ? static_cast<uint16_t>(0x8000 | (-k)) : static_cast<uint16_t>(k);
}
double bf16_val(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

float bf16_round_exact_sum(const double* terms, int n) {
  std::vector<double> e;
  for (int i = 0; i < n; ++i) grow(e, terms[i]);
  double approx = 0;
  for (double v : e) approx += v;
  uint16_t c = static_cast<uint16_t>(encode(DType::bf16, approx, Overflow::nonsat));
  if ((c & 0x7F80) == 0x7F80) return static_cast<float>(decode(DType::bf16, c));  // overflow: Inf
  // Correct c by exact comparisons with the midpoints to its neighbours (RNE).
  auto cmp_mid = [&](uint16_t lo, uint16_t hi) {  // sign(V - (lo+hi)/2)
    double mid = 0.5 * (bf16_val(lo) + bf16_val(hi));  // exact (9 significant bits)
    std::vector<double> t = e;
    grow(t, -mid);
    return expansion_sign(t);
  };
  for (int guard = 0; guard < 4; ++guard) {
    int32_t k = bf16_key(c);
    if (k >= 0x7F7F || k <= -0x7F7F) break;
    uint16_t up = bf16_from_key(k + 1), dn = bf16_from_key(k - 1);
    if (k == 0 && (c & 0x8000) == 0) dn = 0x8001;
    int su = cmp_mid(c, up);
    if (su > 0 || (su == 0 && (up & 1) == 0)) {
      c = up;
      continue;
    }
    int sd = cmp_mid(dn, c);
    if (sd < 0 || (sd == 0 && (dn & 1) == 0)) {
      c = dn;
      continue;
    }
    break;
  }
  if (expansion_sign(e) == 0) c = 0;
  return static_cast<float>(bf16_val(c));
}

// ------------------------------------------------------------------------------------------------
// NVFP4
// ------------------------------------------------------------------------------------------------
float nvfp4_global_encode_scale(float amax) {
  float s = 2688.0f / amax;  // fl(2688/A)
  s = std::fmin(s, kFltMax);  // fminf: NaN -> FLT_MAX
  if (amax == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}

float nvfp4_gemm_alpha(float alpha, float amax_a, float amax_b) {
  const float k = 1.0f / (6.0f * 6.0f * 448.0f * 448.0f);  // 6*6*448*448 = 7225344 exact in fp32
  return ((alpha * amax_a) * amax_b) * k;
}

std::vector<float> rht_columnwise(const std::vector<float>& x, int64_t M, int64_t N, uint16_t sign_mask) {
  ASSAY_INPUT_CHECK(M % 16 == 0, "RHT needs M % 16 == 0 (got M = {})", M);
  std::vector<float> out(static_cast<size_t>(N * M));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m0 = 0; m0 < M; m0 += 16)
      for (int j = 0; j < 16; ++j) {
        double terms[16];
        for (int i = 0; i < 16; ++i) {
          const int h = (__builtin_popcount(static_cast<unsigned>(i & j)) & 1) ? -1 : 1;
          const int s = ((sign_mask >> i) & 1) ? -1 : 1;
          terms[i] = 0.25 * (s * h) * static_cast<double>(x[(m0 + i) * N + n]);  // exact
        }
        out[n * M + m0 + j] = bf16_round_exact_sum(terms, 16);
      }
  return out;
}

namespace {

// One direction of NVFP4, TE recipe. hp: rows x cols fp32.
Nvfp4Dir nvfp4_te_dir(std::vector<float> hp, int64_t rows, int64_t cols, bool block_2d, float amax,
                      bool sr, const std::vector<uint8_t>* rbits, Mutant mut) {
  Nvfp4Dir d;
  d.rows = rows;
  d.cols = cols;
  d.amax = amax;
  float s_enc = nvfp4_global_encode_scale(amax);
  if (mut == Mutant::no_global_scale) s_enc = 1.0f;
  d.s_enc = s_enc;
  d.s_dec = static_cast<float>(1.0 / static_cast<double>(s_enc));
  const float t = s_enc * (1.0f / 6.0f);
  const int64_t sc = d.scale_cols();
  d.scales.assign(static_cast<size_t>(rows * sc), 0);
  d.codes.assign(static_cast<size_t>(rows * cols), 0);
  d.allowed.assign(static_cast<size_t>(rows * cols), 0);
  // Rows are independent (deterministic per element): parallel over rows.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < sc; ++b) {
      const int64_t c0 = b * 16, c1 = std::min(cols, c0 + 16);
      float ab = 0.0f;
      if (!block_2d) {
        for (int64_t c = c0; c < c1; ++c) ab = fmax_drop_nan(ab, std::fabs(hp[r * cols + c]));
      } else {
        // 16x16 tile: rows [r0, r0+16) x cols [c0, c1) of this direction's matrix (max is symmetric,
        // so the transposed direction sees the same tile amax).
        const int64_t r0 = (r / 16) * 16, r1 = std::min(rows, r0 + 16);
        for (int64_t rr = r0; rr < r1; ++rr)
          for (int64_t c = c0; c < c1; ++c) ab = fmax_drop_nan(ab, std::fabs(hp[rr * cols + c]));
      }
      float s;
      if (mut == Mutant::sixth_not_folded)
        s = (ab / 6.0f) * s_enc;
      else
        s = ab * t;
      s = std::fmin(s, kFltMax);
      const uint8_t qs = static_cast<uint8_t>(encode_f32(DType::e4m3, s, Overflow::satfinite));
      d.scales[r * sc + b] = qs;
      const float qsf = static_cast<float>(decode(DType::e4m3, qs));
      float rr = std::fmin(1.0f / (qsf * d.s_dec), kFltMax);
      if (mut == Mutant::qs_zero_encode_zero && qs == 0) rr = 0.0f;
      for (int64_t c = c0; c < c1; ++c) {
        const float x = hp[r * cols + c];
        const float y = x * rr;
        uint8_t code = sr ? e2m1_sr(y, (*rbits)[r * cols + c]) : encode_e2m1_cfg(y, mut);
        uint16_t allow = e2m1_allowed(code);
        if ((qs & 0x7F) == 0) {
          // q_s = 0: the kernel's r = FLT_MAX gives +-6 for non-zero x; a reference with r = 0 gives
          // 0. Both dequantise to 0.
          allow |= zero_codes_mask();
          if (x != 0 && !std::isnan(x)) allow |= static_cast<uint16_t>(bit(7) | bit(15));
        }
        if (std::isnan(x)) allow = 0xFFFF;
        d.codes[r * cols + c] = code;
        d.allowed[r * cols + c] = allow;
      }
    }
  }
  d.packed = pack_e2m1(d.codes, rows, cols);
  if (mut == Mutant::nibble_swap)
    for (auto& byte : d.packed) byte = static_cast<uint8_t>((byte >> 4) | (byte << 4));
  d.hp = std::move(hp);
  return d;
}

inline float ao_div_scalar(float a, float b, bool cuda) { return cuda ? a * (1.0f / b) : a / b; }
inline float torch_clamp(float v, float lo, float hi) {
  if (std::isnan(v)) return v;
  return std::min(std::max(v, lo), hi);
}

Nvfp4Dir nvfp4_ao_dir(std::vector<float> hp, int64_t rows, int64_t cols, const Nvfp4Config& cfg,
                      std::optional<float> amax_override) {
  Nvfp4Dir d;
  d.rows = rows;
  d.cols = cols;
  const bool cuda = cfg.ao_cuda_scalar_div;
  float A = 0.0f;
  for (float v : hp) A = torch_amax_abs(A, v);
  if (amax_override) A = *amax_override;
  d.amax = A;
  float pts = 1.0f;
  if (cfg.ao_two_level) pts = ao_div_scalar(A, 2688.0f, cuda);
  if (cfg.mutant == Mutant::no_global_scale) pts = 1.0f;
  d.s_enc = 0.0f;
  d.s_dec = pts;
  const float e4m3_tiny = 0.015625f;  // 2^-6
  const int64_t sc = d.scale_cols();
  d.scales.assign(static_cast<size_t>(rows * sc), 0);
  d.codes.assign(static_cast<size_t>(rows * cols), 0);
  d.allowed.assign(static_cast<size_t>(rows * cols), 0);
  for_each_block(rows, cols, 16, [&](int64_t r, int64_t b, int64_t c0, int64_t c1) {
    float ab = 0.0f;
    for (int64_t c = c0; c < c1; ++c) ab = torch_amax_abs(ab, hp[r * cols + c]);
    const float bs = ao_div_scalar(ab, 6.0f, cuda);
    float scaled = (cfg.ao_two_level && cfg.mutant != Mutant::no_global_scale) ? bs / pts : bs;
    scaled = torch_clamp(scaled, e4m3_tiny, 448.0f);
    const uint8_t qs = static_cast<uint8_t>(encode_f32(DType::e4m3, scaled, Overflow::satfinite));
    d.scales[r * sc + b] = qs;
    const float qsf = static_cast<float>(decode(DType::e4m3, qs));
    const float total = cfg.ao_two_level ? pts * qsf : qsf;
    for (int64_t c = c0; c < c1; ++c) {
      const float x = hp[r * cols + c];
      const float y = torch_clamp(x / total, -6.0f, 6.0f);
      const uint8_t code = encode_e2m1_cfg(y, cfg.mutant);
      uint16_t allow = e2m1_allowed(code);
      if (std::isnan(y)) allow = 0xFFFF;  // torchao's f32_to_f4_unpacked NaN rule: unspecified
      d.codes[r * cols + c] = code;
      d.allowed[r * cols + c] = allow;
    }
  });
  d.packed = pack_e2m1(d.codes, rows, cols);
  if (cfg.mutant == Mutant::nibble_swap)
    for (auto& byte : d.packed) byte = static_cast<uint8_t>((byte >> 4) | (byte << 4));
  d.hp = std::move(hp);
  return d;
}

void check_nvfp4_args(const std::vector<float>& x, int64_t M, int64_t N, const Nvfp4Config& cfg,
                      const std::vector<uint8_t>* rr, const std::vector<uint8_t>* rc) {
  ASSAY_INPUT_CHECK(M >= 1 && N >= 1, "nvfp4: M, N must be >= 1 (got {}, {})", M, N);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(x.size()) == M * N, "nvfp4: x has {} values, want {}",
                    x.size(), M * N);
  ASSAY_INPUT_CHECK(!(cfg.rht && cfg.block_2d), "nvfp4: RHT is not combined with 2D blocks");
  ASSAY_INPUT_CHECK(!cfg.rht || M % 16 == 0, "nvfp4: RHT needs M % 16 == 0");
  ASSAY_INPUT_CHECK(cfg.recipe == Nvfp4Recipe::te || (!cfg.block_2d && !cfg.rht && !cfg.stochastic),
                    "nvfp4: torchao recipe supports 1x16 round-to-nearest only");
  if (cfg.stochastic) {
    ASSAY_INPUT_CHECK(!cfg.rowwise || (rr && static_cast<int64_t>(rr->size()) == M * N),
                      "nvfp4: SR needs rbits_row [M, N]");
    ASSAY_INPUT_CHECK(!cfg.columnwise || (rc && static_cast<int64_t>(rc->size()) == M * N),
                      "nvfp4: SR needs rbits_col [N, M]");
  }
}

float amax_drop_nan(const std::vector<float>& v) {
  float a = 0.0f;
  for (float x : v) a = fmax_drop_nan(a, std::fabs(x));
  return a;
}

}  // namespace

Nvfp4Result nvfp4_quantize(const std::vector<float>& x, int64_t M, int64_t N, const Nvfp4Config& cfg,
                           const std::vector<uint8_t>* rbits_row, const std::vector<uint8_t>* rbits_col) {
  check_nvfp4_args(x, M, N, cfg, rbits_row, rbits_col);
  Nvfp4Result res;
  if (cfg.recipe == Nvfp4Recipe::torchao) {
    if (cfg.rowwise) res.row = nvfp4_ao_dir(x, M, N, cfg, cfg.amax_rowwise);
    if (cfg.columnwise) res.col = nvfp4_ao_dir(transpose(x, M, N), N, M, cfg, cfg.amax_columnwise);
    return res;
  }
  if (cfg.rowwise) {
    const float A = cfg.amax_rowwise ? *cfg.amax_rowwise : amax_drop_nan(x);
    res.row = nvfp4_te_dir(x, M, N, cfg.block_2d, A, cfg.stochastic, rbits_row, cfg.mutant);
  }
  if (cfg.columnwise) {
    std::vector<float> xt = cfg.rht ? rht_columnwise(x, M, N, cfg.rht_sign_mask) : transpose(x, M, N);
    const float A = cfg.amax_columnwise ? *cfg.amax_columnwise : amax_drop_nan(xt);
    res.col = nvfp4_te_dir(std::move(xt), N, M, cfg.block_2d, A, cfg.stochastic, rbits_col, cfg.mutant);
  }
  return res;
}

std::vector<float> nvfp4_dequantize_te(const Nvfp4Dir& d) {
  std::vector<float> out(static_cast<size_t>(d.rows * d.cols));
  const float k = 1.0f / 2688.0f;
  const int64_t sc = d.scale_cols();
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t c = 0; c < d.cols; ++c) {
      const float qs = static_cast<float>(decode(DType::e4m3, d.scales[r * sc + c / 16]));
      const float fin = (qs * d.amax) * k;
      out[r * d.cols + c] = static_cast<float>(e2m1_value(d.codes[r * d.cols + c])) * fin;
    }
  return out;
}

std::vector<double> nvfp4_dequantize_exact(const Nvfp4Dir& d) {
  std::vector<double> out(static_cast<size_t>(d.rows * d.cols));
  const int64_t sc = d.scale_cols();
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t c = 0; c < d.cols; ++c) {
      const double qs = decode(DType::e4m3, d.scales[r * sc + c / 16]);
      out[r * d.cols + c] = e2m1_value(d.codes[r * d.cols + c]) * qs * static_cast<double>(d.s_dec);
    }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Compare
// ------------------------------------------------------------------------------------------------
std::optional<CodeMismatch> compare_codes(const std::string& what, const std::vector<uint8_t>& expected,
                                          const std::vector<uint16_t>* allowed,
                                          const std::vector<uint8_t>& got, int64_t rows, int64_t cols,
                                          int64_t block_rows, int64_t block_cols, std::optional<DType> dt,
                                          const std::vector<uint8_t>* alt) {
  CodeMismatch mm;
  if (expected.size() != got.size() || static_cast<int64_t>(expected.size()) != rows * cols) {
    mm.count = -1;
    mm.message = fmt::format("{}: size mismatch (expected {}, got {}, shape [{}, {}])", what,
                             expected.size(), got.size(), rows, cols);
    return mm;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      bool ok;
      if (allowed && (*allowed)[i] != 0 && !(dt && (*allowed)[i] == 1))
        ok = got[i] < 16 && (((*allowed)[i] >> got[i]) & 1);
      else if (dt && is_nan_code(*dt, expected[i]))
        ok = is_nan_code(*dt, got[i]);
      else
        ok = expected[i] == got[i];
      if (!ok && alt && (*alt)[i] == got[i]) ok = true;
      if (!ok) {
        if (mm.count == 0) {
          mm.first_row = r;
          mm.first_col = c;
          mm.block_row = r / block_rows;
          mm.block_col = c / block_cols;
          mm.expected = expected[i];
          mm.got = got[i];
        }
        ++mm.count;
      }
    }
  if (mm.count == 0) return std::nullopt;
  mm.message = fmt::format(
      "{}: {} mismatching codes; first at [row={}, col={}] in block [{}, {}] ({}x{} blocks): "
      "expected 0x{:02X}, got 0x{:02X}",
      what, mm.count, mm.first_row, mm.first_col, mm.block_row, mm.block_col, block_rows, block_cols,
      mm.expected, mm.got);
  return mm;
}

}  // namespace assay::quant
