// Form "tensor" of the quantization oracles (see quant.h): whole-tensor passes shaped like the Python
// references, with encoders written from scratch (no reference/core/dtype.h encode/ue8m0 calls).
// Every fp32 operation is computed as (float)(double op double): for +, -, *, / with p = 24 and
// 53-bit doubles this equals the correctly rounded fp32 result, so the arithmetic path differs from
// the kernel form's plain float operations while the mathematics is identical.
#include <Eigen/Dense>
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/core/check.h"
#include "reference/quant/quant.h"

namespace assay::quant::ref {

namespace {

constexpr float kFltMax = std::numeric_limits<float>::max();
inline float f32(double v) { return static_cast<float>(v); }
inline float mul(float a, float b) { return f32(static_cast<double>(a) * static_cast<double>(b)); }
inline float div(float a, float b) { return f32(static_cast<double>(a) / static_cast<double>(b)); }

struct Fmt {
  int ebits, mbits, bias;
  uint8_t max_code, sign_bit, nan_code, inf_code;  // inf_code 0 = none
};
Fmt fmt_of(DType t) {
  switch (t) {
    case DType::e4m3: return {4, 3, 7, 0x7E, 0x80, 0x7F, 0};
    case DType::e5m2: return {5, 2, 15, 0x7B, 0x80, 0x7F, 0x7C};
    case DType::e2m1: return {2, 1, 1, 0x7, 0x8, 0x7, 0};
    default: break;
  }
  throw InputError("encode_exhaustive: e4m3, e5m2 or e2m1 only");
}
double code_value(const Fmt& f, unsigned c) {  // positive codes only
  const unsigned e = c >> f.mbits, m = c & ((1u << f.mbits) - 1);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - f.bias - f.mbits);
  return std::ldexp(static_cast<double>((1u << f.mbits) + m), static_cast<int>(e) - f.bias - f.mbits);
}

float pow2f(int k) { return f32(std::ldexp(1.0, k)); }

std::vector<float> transpose(const std::vector<float>& x, int64_t M, int64_t N) {
  std::vector<float> t(static_cast<size_t>(M * N));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) t[n * M + m] = x[m * N + n];
  return t;
}

// Block amax matrix [rows/br, cols/bc] (ragged), NaN dropped or propagated.
std::vector<float> block_amax(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t br,
                              int64_t bc, bool nan_propagates) {
  const int64_t nr = (rows + br - 1) / br, nc = (cols + bc - 1) / bc;
  std::vector<float> a(static_cast<size_t>(nr * nc), 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float& s = a[(i / br) * nc + j / bc];
      const float x = v[i * cols + j];
      if (std::isnan(x)) {
        if (nan_propagates) s = x;
        continue;
      }
      if (!std::isnan(s) && std::fabs(x) > s) s = std::fabs(x);
    }
  return a;
}

std::vector<uint8_t> pack_ref(const std::vector<uint8_t>& codes, int64_t rows, int64_t cols) {
  const int64_t pc = (cols + 1) / 2;
  std::vector<uint8_t> out(static_cast<size_t>(rows * pc));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < pc; ++k) {
      const unsigned even = codes[r * cols + 2 * k];
      const unsigned odd = 2 * k + 1 < cols ? codes[r * cols + 2 * k + 1] : 0u;
      out[r * pc + k] = static_cast<uint8_t>(even + 16 * odd);  // TE cast_to_fp4x2
    }
  return out;
}

}  // namespace

uint8_t encode_exhaustive(DType t, double x, Overflow ov) {
  const Fmt f = fmt_of(t);
  if (std::isnan(x)) return f.nan_code;
  const uint8_t sign = std::signbit(x) ? f.sign_bit : 0;
  const double a = std::fabs(x);
  const double maxv = code_value(f, f.max_code);
  const double ulp_max = code_value(f, f.max_code) - code_value(f, f.max_code - 1u);
  const double thr = maxv + ulp_max / 2;
  const bool max_odd = (f.max_code & 1u) != 0;
  const bool overflow = std::isinf(a) || a > thr || (a == thr && max_odd);
  if (overflow) {
    if (ov == Overflow::satfinite || t == DType::e2m1) return static_cast<uint8_t>(f.max_code | sign);
    if (f.inf_code) return static_cast<uint8_t>(f.inf_code | sign);
    return static_cast<uint8_t>(f.nan_code | sign);
  }
  unsigned best = 0;
  double bd = std::numeric_limits<double>::infinity();
  for (unsigned c = 0; c <= f.max_code; ++c) {
    const double d = std::fabs(code_value(f, c) - a);  // exact: both have few significant bits
    if (d < bd || (d == bd && (c & 1u) == 0)) {
      bd = d;
      best = c;
    }
  }
  return static_cast<uint8_t>(best | sign);
}

uint8_t e2m1_table(double y) {
  if (std::isnan(y)) return 7;
  const uint8_t s = std::signbit(y) ? 8 : 0;
  const double a = std::fabs(y);
  uint8_t i;
  if (a <= 0.25) i = 0;
  else if (a < 0.75) i = 1;
  else if (a <= 1.25) i = 2;
  else if (a < 1.75) i = 3;
  else if (a <= 2.5) i = 4;
  else if (a < 3.5) i = 5;
  else if (a <= 5.0) i = 6;
  else i = 7;
  return static_cast<uint8_t>(i | s);
}

uint8_t e2m1_sr_ref(float y, uint8_t rbits) {
  if (std::isnan(y)) return 7;
  const uint8_t s = std::signbit(y) ? 8 : 0;
  const double a = std::fabs(static_cast<double>(y));
  if (a >= 6.0) return static_cast<uint8_t>(7 | s);
  // grid neighbours lo <= a < hi
  int lo = 0;
  while (lo < 7 && kE2M1[lo + 1] <= a) ++lo;
  const double step = a < 2 ? 0.5 : (a < 4 ? 1.0 : 2.0);
  const float t = f32(a + (rbits / 256.0) * step);  // one fp32 rounding of the (exact) sum
  const int idx = (static_cast<double>(t) >= kE2M1[lo + 1]) ? lo + 1 : lo;
  return static_cast<uint8_t>(idx | s);
}

uint8_t ue8m0_floor_ref(float amax, int emax) {
  if (std::isnan(amax) || std::isinf(amax)) return 0xFF;
  if (amax == 0.0f) return 0;
  int e;
  std::frexp(static_cast<double>(amax), &e);  // amax = m * 2^e, m in [0.5, 1)
  const int k = std::clamp(e - 1 - emax, -127, 127);
  return static_cast<uint8_t>(k + 127);
}

uint8_t ue8m0_rceil_ref(float v) {
  if (std::isnan(v)) return 0xFF;
  if (std::isinf(v)) return 0xFE;
  if (v <= 0.0f) return 0;
  int e;
  const double m = std::frexp(static_cast<double>(v), &e);
  const int k = std::clamp(m == 0.5 ? e - 1 : e, -127, 127);
  return static_cast<uint8_t>(k + 127);
}

float bf16_from_f64_ref(double v) {
  if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
  if (v == 0 || std::isinf(v)) return static_cast<float>(v);
  const int e = std::ilogb(v);
  const double q = std::ldexp(1.0, std::max(e, -126) - 7);
  const double r = std::nearbyint(v / q) * q;  // default rounding mode: ties to even
  const double bmax = std::ldexp(255.0, 127 - 7);  // 0x7F7F = (2 - 2^-7) * 2^127
  if (std::fabs(r) > bmax) return std::copysign(std::numeric_limits<float>::infinity(), v);
  return static_cast<float>(r);
}

std::vector<float> rht_columnwise_fwht(const std::vector<float>& x, int64_t M, int64_t N,
                                       uint16_t sign_mask) {
  ASSAY_INPUT_CHECK(M % 16 == 0, "RHT needs M % 16 == 0");
  std::vector<float> xt = transpose(x, M, N), out(xt.size());
  for (int64_t r = 0; r < N; ++r)
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
      double w[16];
      for (int i = 0; i < 16; ++i) w[i] = ((sign_mask >> i) & 1 ? -1.0 : 1.0) * xt[r * M + m0 + i];
      for (int len = 1; len < 16; len <<= 1)
        for (int i = 0; i < 16; i += 2 * len)
          for (int j = i; j < i + len; ++j) {
            const double a = w[j], b = w[j + len];
            w[j] = a + b;
            w[j + len] = a - b;
          }
      for (int j = 0; j < 16; ++j) out[r * M + m0 + j] = bf16_from_f64_ref(0.25 * w[j]);
    }
  return out;
}

namespace {

Nvfp4Dir nvfp4_dir_ref(std::vector<float> hp, int64_t rows, int64_t cols, const Nvfp4Config& cfg,
                       std::optional<float> amax_override, const std::vector<uint8_t>* rbits) {
  Nvfp4Dir d;
  d.rows = rows;
  d.cols = cols;
  const int64_t nb = (cols + 15) / 16;
  const bool ao = cfg.recipe == Nvfp4Recipe::torchao;
  // global amax
  std::vector<float> g = block_amax(hp, rows, cols, rows, cols, /*nan_propagates=*/ao);
  d.amax = amax_override ? *amax_override : g[0];
  // block amax, replicated to [rows, nb]
  const int64_t br = cfg.block_2d ? 16 : 1;
  std::vector<float> ba = block_amax(hp, rows, cols, br, 16, ao);
  std::vector<float> s_block(static_cast<size_t>(rows * nb));
  d.scales.resize(static_cast<size_t>(rows * nb));
  std::vector<float> enc(static_cast<size_t>(rows * nb));
  if (!ao) {
    float s_enc = div(2688.0f, d.amax);
    if (std::isnan(s_enc) || s_enc > kFltMax) s_enc = kFltMax;
    if (d.amax == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
    d.s_enc = s_enc;
    d.s_dec = f32(1.0 / s_enc);
    const float t = mul(s_enc, f32(1.0 / 6.0));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        float s = mul(ba[(r / br) * nb + b], t);
        if (std::isnan(s) || s > kFltMax) s = kFltMax;  // fminf(s, FLT_MAX)
        const uint8_t qs = encode_exhaustive(DType::e4m3, s, Overflow::satfinite);
        d.scales[r * nb + b] = qs;
        const float qv = f32(code_value(fmt_of(DType::e4m3), qs & 0x7F) * ((qs & 0x80) ? -1 : 1));
        float rr = div(1.0f, mul(qv, d.s_dec));
        if (rr > kFltMax) rr = kFltMax;
        enc[r * nb + b] = rr;
      }
  } else {
    const bool cuda = cfg.ao_cuda_scalar_div;
    auto sdiv = [&](float a, float b) { return cuda ? mul(a, div(1.0f, b)) : div(a, b); };
    const float pts = cfg.ao_two_level ? sdiv(d.amax, 2688.0f) : 1.0f;
    d.s_enc = 0.0f;
    d.s_dec = pts;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        float sc = sdiv(ba[r * nb + b], 6.0f);
        if (cfg.ao_two_level) sc = div(sc, pts);
        if (!std::isnan(sc)) sc = std::min(std::max(sc, pow2f(-6)), 448.0f);
        const uint8_t qs = encode_exhaustive(DType::e4m3, sc, Overflow::satfinite);
        d.scales[r * nb + b] = qs;
        const float qv = std::isnan(sc) ? sc : f32(code_value(fmt_of(DType::e4m3), qs & 0x7F));
        enc[r * nb + b] = cfg.ao_two_level ? mul(pts, qv) : qv;  // a divisor here
      }
  }
  d.codes.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float x = hp[r * cols + c];
      const float e = enc[r * nb + c / 16];
      float y;
      if (!ao) {
        y = mul(x, e);
      } else {
        y = div(x, e);
        if (!std::isnan(y)) y = std::min(std::max(y, -6.0f), 6.0f);
      }
      d.codes[r * cols + c] = cfg.stochastic ? e2m1_sr_ref(y, (*rbits)[r * cols + c]) : e2m1_table(y);
    }
  d.packed = pack_ref(d.codes, rows, cols);
  d.hp = std::move(hp);
  return d;
}

}  // namespace

Nvfp4Result nvfp4_quantize(const std::vector<float>& x, int64_t M, int64_t N, const Nvfp4Config& cfg,
                           const std::vector<uint8_t>* rbits_row, const std::vector<uint8_t>* rbits_col) {
  ASSAY_INPUT_CHECK(static_cast<int64_t>(x.size()) == M * N, "nvfp4 ref: shape");
  Nvfp4Result res;
  if (cfg.rowwise) res.row = nvfp4_dir_ref(x, M, N, cfg, cfg.amax_rowwise, rbits_row);
  if (cfg.columnwise) {
    std::vector<float> xt = cfg.rht ? rht_columnwise_fwht(x, M, N, cfg.rht_sign_mask) : transpose(x, M, N);
    res.col = nvfp4_dir_ref(std::move(xt), N, M, cfg, cfg.amax_columnwise, rbits_col);
  }
  return res;
}

MxResult mx_quantize(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg) {
  auto one = [&](const std::vector<float>& v, int64_t rows, int64_t cols) {
    MxDir d;
    d.rows = rows;
    d.cols = cols;
    const int64_t nb = (cols + 31) / 32;
    const bool rceil = cfg.rule == MxScaleRule::rceil;
    std::vector<float> ba = block_amax(v, rows, cols, 1, 32, /*nan_propagates=*/!rceil);
    const double maxe = cfg.elem == DType::e2m1 ? 6.0 : code_value(fmt_of(cfg.elem), fmt_of(cfg.elem).max_code);
    const float rcp = f32(1.0 / maxe);
    d.scales.resize(static_cast<size_t>(rows * nb));
    for (size_t i = 0; i < ba.size(); ++i)
      d.scales[i] = rceil ? ue8m0_rceil_ref(mul(ba[i], rcp)) : ue8m0_floor_ref(ba[i], mx_emax(cfg.elem));
    d.codes.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t e = d.scales[r * nb + c / 32];
        const double y = e == 0xFF ? std::nan("") : v[r * cols + c] * std::exp2(127.0 - e);
        d.codes[r * cols + c] = cfg.elem == DType::e2m1 ? e2m1_table(y)
                                                        : encode_exhaustive(cfg.elem, y, Overflow::satfinite);
      }
    if (cfg.elem == DType::e2m1) d.packed = pack_ref(d.codes, rows, cols);
    return d;
  };
  MxResult r;
  if (cfg.rowwise) r.row = one(x, M, N);
  if (cfg.columnwise) r.col = one(transpose(x, M, N), N, M);
  return r;
}

Fp8Result fp8_quantize(const std::vector<float>& x, int64_t M, int64_t N, const Fp8Config& cfg) {
  Fp8Result r;
  r.rows = M;
  r.cols = N;
  int64_t gr = M, gc = N;
  if (cfg.gran == Fp8Granularity::per_channel) gr = 1;
  if (cfg.gran == Fp8Granularity::block_1x128) {
    gr = 1;
    gc = cfg.block;
  }
  if (cfg.gran == Fp8Granularity::block_128x128) gr = gc = cfg.block;
  r.group_rows = gr;
  r.group_cols = gc;
  r.scale_rows = (M + gr - 1) / gr;
  r.scale_cols = (N + gc - 1) / gc;
  const bool te = cfg.recipe == Fp8ScaleRecipe::te_current;
  r.amax = block_amax(x, M, N, gr, gc, /*nan_propagates=*/!te);
  if (cfg.amax_override && cfg.gran == Fp8Granularity::per_tensor) r.amax[0] = *cfg.amax_override;
  const float maxv = f32(code_value(fmt_of(cfg.fp8), fmt_of(cfg.fp8).max_code));
  r.scale.resize(r.amax.size());
  r.scale_inv.resize(r.amax.size());
  for (size_t g = 0; g < r.amax.size(); ++g) {
    float a = r.amax[g];
    if (te) {
      if (a < cfg.epsilon) a = cfg.epsilon;
      float s = 1.0f;
      if (std::isfinite(a) && a != 0.0f) {
        s = div(maxv, a);
        if (std::isinf(s)) s = kFltMax;
        if (cfg.pow2_scale) {
          int e;
          std::frexp(static_cast<double>(s), &e);
          s = pow2f(e - 1);
        }
      }
      r.amax[g] = a;
      r.scale[g] = s;
      r.scale_inv[g] = div(1.0f, s);
    } else {
      if (!std::isnan(a) && a < f32(1e-4)) a = f32(1e-4);
      float sf = cfg.torch_cuda_scalar_div ? mul(a, div(1.0f, 448.0f)) : div(a, 448.0f);
      if (cfg.pow2_scale) {
        int e;
        const double m = std::frexp(static_cast<double>(sf), &e);
        sf = pow2f(std::clamp(m == 0.5 ? e - 1 : e, -126, 127));
      }
      r.amax[g] = a;
      r.scale_inv[g] = sf;
      r.scale[g] = div(1.0f, sf);
    }
  }
  r.codes.resize(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float y = mul(x[i * N + j], r.scale[(i / gr) * r.scale_cols + j / gc]);
      r.codes[i * N + j] = encode_exhaustive(cfg.fp8, y, cfg.overflow);
    }
  return r;
}

std::vector<uint8_t> swizzle_scales_permute(const std::vector<uint8_t>& compact, int64_t rows,
                                            int64_t cols, uint8_t pad) {
  const int64_t R = (rows + 127) / 128 * 128, C = (cols + 3) / 4 * 4;
  // swizzled viewed as (R/128, C/4, 32, 4, 4)[a][b][k][j][l] = compact(R/128, 4, 32, C/4, 4)[a][j][k][b][l]
  std::vector<uint8_t> out(static_cast<size_t>(R * C), pad);
  int64_t o = 0;
  for (int64_t a = 0; a < R / 128; ++a)
    for (int64_t b = 0; b < C / 4; ++b)
      for (int64_t k = 0; k < 32; ++k)
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t l = 0; l < 4; ++l, ++o) {
            const int64_t row = a * 128 + j * 32 + k, col = b * 4 + l;
            if (row < rows && col < cols) out[o] = compact[row * cols + col];
          }
  return out;
}

GemmResult block_scaled_gemm_eigen(const ScaledOperand& a, const ScaledOperand& b, double alpha,
                                   double beta, const std::vector<double>* c) {
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t M = a.rows, N = b.rows, K = a.k;
  auto deq = [&](const ScaledOperand& o) {
    Mat m(o.rows, o.k);
    const int64_t kb = (o.k + o.v - 1) / o.v;
    for (int64_t i = 0; i < o.rows; ++i)
      for (int64_t k = 0; k < o.k; ++k) m(i, k) = o.elem[i * o.k + k] * o.scale[i * kb + k / o.v];
    return m;
  };
  const Mat A = deq(a), B = deq(b);
  Mat D = alpha * (A * B.transpose());
  Mat Bd = std::fabs(alpha) * (A.cwiseAbs() * B.cwiseAbs().transpose());
  GemmResult g;
  g.m = M;
  g.n = N;
  g.d.resize(static_cast<size_t>(M * N));
  g.bound.resize(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      g.d[i * N + j] = D(i, j) + (c ? beta * (*c)[i * N + j] : 0.0);
      g.bound[i * N + j] = Bd(i, j);
    }
  (void)K;
  return g;
}

}  // namespace assay::quant::ref
