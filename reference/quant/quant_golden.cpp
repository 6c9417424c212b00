// Golden builders (see quant.h): both forms, cross-check, package as OracleResult.
#include <bit>
#include <cmath>
#include <cstring>

#include "reference/core/check.h"
#include "reference/quant/quant.h"

namespace assay::quant {

namespace {

uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }

Output code_output(std::string name, std::vector<std::string> axes, Shape shape, DType dt,
                   const std::vector<uint8_t>& codes) {
  Output o;
  o.expected.name = std::move(name);
  o.expected.axes = std::move(axes);
  o.expected.shape = std::move(shape);
  o.expected.dtype = dt;
  o.expected.data.resize(codes.size());
  std::vector<uint64_t> r(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    o.expected.data[i] = dt == DType::e2m1 ? e2m1_value(codes[i]) : decode(dt, codes[i]);
    r[i] = codes[i];
  }
  o.rounded = std::move(r);
  return o;
}

Output f32_output(std::string name, std::vector<std::string> axes, Shape shape, const std::vector<double>& exact,
                  const std::vector<float>* rounded) {
  Output o;
  o.expected = Tensor{std::move(name), std::move(axes), std::move(shape), DType::f32, exact};
  if (rounded) {
    std::vector<uint64_t> r(rounded->size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = f32_bits((*rounded)[i]);
    o.rounded = std::move(r);
  }
  return o;
}

std::vector<double> decoded(const std::vector<uint8_t>& c, DType dt) {
  std::vector<double> v(c.size());
  for (size_t i = 0; i < c.size(); ++i) v[i] = dt == DType::e2m1 ? e2m1_value(c[i]) : decode(dt, c[i]);
  return v;
}

void agree(OracleResult& r, const std::string& tensor, const std::vector<uint8_t>& a,
           const std::vector<uint8_t>& b, DType dt, const std::vector<uint16_t>* allowed = nullptr) {
  // bit identity (NaN codes as a class; within the allowed set when one is given)
  ASSAY_CHECK(a.size() == b.size(), "{}: forms differ in size", tensor);
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = a[i] == b[i];
    if (!ok && dt != DType::u8 && is_nan_code(dt, a[i]) && is_nan_code(dt, b[i])) ok = true;
    if (!ok && allowed && (*allowed)[i] > 1 && (((*allowed)[i] >> b[i]) & 1)) ok = true;
    ASSAY_CHECK(ok, "{}: kernel and tensor forms differ at flat index {} (0x{:02X} vs 0x{:02X})", tensor, i,
                a[i], b[i]);
  }
  if (dt == DType::u8) {
    r.agreement.push_back({tensor, "kernel", "tensor", 0.0});
    return;
  }
  r.agreement.push_back({tensor, "kernel", "tensor", agreement_rel(decoded(a, dt), decoded(b, dt))});
}

// Quantizing NaN/Inf inputs legitimately yields non-finite truths (NaN codes, NaN scales).
void mark_nonfinite(OracleResult& r) {
  for (auto& o : r.outputs)
    for (double v : o.expected.data)
      if (!std::isfinite(v)) {
        o.allow_nonfinite = true;
        break;
      }
}

bool any_multi(const std::vector<uint16_t>& m) {
  for (auto v : m)
    if (v != 0 && (v & (v - 1)) != 0) return true;
  return false;
}

}  // namespace

OracleResult nvfp4_oracle(const std::vector<float>& x, int64_t M, int64_t N, const Nvfp4Config& cfg,
                          const std::vector<uint8_t>* rbits_row, const std::vector<uint8_t>* rbits_col) {
  ASSAY_INPUT_CHECK(cfg.mutant == Mutant::none, "nvfp4_oracle: mutants are not golden material");
  const Nvfp4Result a = nvfp4_quantize(x, M, N, cfg, rbits_row, rbits_col);
  const Nvfp4Result b = ref::nvfp4_quantize(x, M, N, cfg, rbits_row, rbits_col);
  // The value-equivalent encoding of q_s = 0 blocks (r = 0: every element +-0, as TE's old C++
  // test reference encodes them): the packed bytes' allowed alternative (the codes' is in the
  // allowed masks).
  Nvfp4Config zc = cfg;
  zc.mutant = Mutant::qs_zero_encode_zero;
  const Nvfp4Result z = nvfp4_quantize(x, M, N, zc, rbits_row, rbits_col);
  OracleResult r;
  auto one = [&](const Nvfp4Dir& da, const Nvfp4Dir& db, const std::string& sfx, const std::string& ar,
                 const std::string& ac) {
    const Shape s{da.rows, da.cols}, ss{da.rows, da.scale_cols()}, ps{da.rows, (da.cols + 1) / 2};
    r.outputs.push_back(code_output("q" + sfx, {ar, ac}, s, DType::e2m1, da.codes));
    if (any_multi(da.allowed)) r.outputs.back().allowed_mask = std::vector<uint64_t>(da.allowed.begin(), da.allowed.end());
    agree(r, "q" + sfx, da.codes, db.codes, DType::e2m1, &da.allowed);
    r.outputs.push_back(code_output("scale" + sfx, {ar, ac + "B"}, ss, DType::e4m3, da.scales));
    agree(r, "scale" + sfx, da.scales, db.scales, DType::e4m3);
    Output am = f32_output("amax" + sfx, {"one"}, {1}, {static_cast<double>(da.amax)}, nullptr);
    am.rounded = std::vector<uint64_t>{f32_bits(da.amax)};
    r.outputs.push_back(std::move(am));
    ASSAY_CHECK(f32_bits(da.amax) == f32_bits(db.amax), "amax{}: forms differ", sfx);
    r.agreement.push_back({"amax" + sfx, "kernel", "tensor", 0.0});
    Output pk = code_output("packed" + sfx, {ar, ac + "2"}, ps, DType::u8, da.packed);
    const Nvfp4Dir& dz = sfx == "_row" ? *z.row : *z.col;
    if (dz.packed != da.packed) pk.alt = std::vector<double>(dz.packed.begin(), dz.packed.end());
    r.outputs.push_back(std::move(pk));
    agree(r, "packed" + sfx, da.packed, db.packed, DType::u8);
    const auto ex = nvfp4_dequantize_exact(da);
    if (cfg.recipe == Nvfp4Recipe::te) {
      // TE's dequantize scales by q_s * amax / 2688, its quantizer by S_dec: the same number while
      // amax is finite. With a non-finite amax the quantizer falls back to S_enc = S_dec = 1 (finite
      // values, /expected) and the amax formula gives Inf / NaN. The codes a kernel should write are
      // the ones that decode to the values: there the fp32 rounding of the exact value.
      auto te = nvfp4_dequantize_te(da);
      for (size_t i = 0; i < te.size(); ++i)
        if (!std::isfinite(te[i]) && std::isfinite(ex[i])) te[i] = static_cast<float>(ex[i]);
      r.outputs.push_back(f32_output("xhat" + sfx, {ar, ac}, s, ex, &te));
    } else {
      r.outputs.push_back(f32_output("xhat" + sfx, {ar, ac}, s, ex, nullptr));
    }
    r.agreement.push_back({"xhat" + sfx, "kernel", "tensor", agreement_rel(ex, nvfp4_dequantize_exact(db))});
    r.intermediates.push_back(Tensor{"s_enc" + sfx, {"one"}, {1}, DType::f32, {static_cast<double>(da.s_enc)}});
    r.intermediates.push_back(Tensor{"s_dec" + sfx, {"one"}, {1}, DType::f32, {static_cast<double>(da.s_dec)}});
  };
  if (a.row) one(*a.row, *b.row, "_row", "M", "N");
  if (a.col) {
    one(*a.col, *b.col, "_col", "N", "M");
    if (cfg.rht) {
      ASSAY_CHECK(a.col->hp == b.col->hp, "RHT: exact-sum and FWHT forms differ");
      std::vector<double> hp(a.col->hp.begin(), a.col->hp.end());
      r.intermediates.push_back(Tensor{"hp_col", {"N", "M"}, {N, M}, DType::bf16, hp});
    }
  }
  mark_nonfinite(r);
  return r;
}

OracleResult mx_oracle(const std::vector<float>& x, int64_t M, int64_t N, const MxConfig& cfg) {
  ASSAY_INPUT_CHECK(cfg.mutant == Mutant::none, "mx_oracle: mutants are not golden material");
  const MxResult a = mx_quantize(x, M, N, cfg);
  const MxResult b = ref::mx_quantize(x, M, N, cfg);
  OracleResult r;
  const bool fp4 = cfg.elem == DType::e2m1;
  auto one = [&](const MxDir& da, const MxDir& db, const std::string& sfx, const std::string& ar,
                 const std::string& ac) {
    const Shape s{da.rows, da.cols}, ss{da.rows, da.scale_cols()};
    r.outputs.push_back(code_output("q" + sfx, {ar, ac}, s, cfg.elem, da.codes));
    const size_t qi = r.outputs.size() - 1;
    if (fp4 && any_multi(da.allowed))
      r.outputs[qi].allowed_mask = std::vector<uint64_t>(da.allowed.begin(), da.allowed.end());
    agree(r, "q" + sfx, da.codes, db.codes, cfg.elem, fp4 ? &da.allowed : nullptr);
    r.outputs.push_back(code_output("scale" + sfx, {ar, ac + "B"}, ss, DType::ue8m0, da.scales));
    agree(r, "scale" + sfx, da.scales, db.scales, DType::ue8m0);
    // NaN inside an RCEIL block: torchao's NaN scale (0xFF) is the allowed alternative (quant.h).
    const bool nan_alt = da.scale_alt != da.scales;
    if (nan_alt) r.outputs.back().alt = decoded(da.scale_alt, DType::ue8m0);
    if (da.alt != da.codes) r.outputs[qi].alt = decoded(da.alt, cfg.elem);
    r.outputs[qi].scaled_by = "scale" + sfx, r.outputs[qi].scale_block = 32;
    if (fp4) {
      r.outputs.push_back(code_output("packed" + sfx, {ar, ac + "2"}, {da.rows, (da.cols + 1) / 2}, DType::u8, da.packed));
      agree(r, "packed" + sfx, da.packed, db.packed, DType::u8);
      r.outputs.back().scaled_by = "scale" + sfx, r.outputs.back().scale_block = 16;
    }
    const auto ex = mx_dequantize(da, cfg.elem);
    r.outputs.push_back(f32_output("xhat" + sfx, {ar, ac}, s, ex, nullptr));
    r.outputs.back().scaled_by = "scale" + sfx, r.outputs.back().scale_block = 32;
    if (nan_alt || da.alt != da.codes) {
      // A kernel that writes the allowed alternative codes and scales dequantizes them to this:
      // torchao's NaN scale makes its whole block NaN; TE's exp2f_rcp encodings (scale byte 0
      // encoded with multiplier 1, torchao RCEIL too; 0xFE with multiplier 0) give codes whose
      // spec dequantization (code * 2^(e-127)) is +-0 or NaN.
      MxDir ao = da;
      ao.codes = da.alt;
      ao.scales = da.scale_alt;
      r.outputs.back().alt = mx_dequantize(ao, cfg.elem);
    }
    r.agreement.push_back({"xhat" + sfx, "kernel", "tensor", agreement_rel(ex, mx_dequantize(db, cfg.elem))});
  };
  if (a.row) one(*a.row, *b.row, "_row", "M", "N");
  if (a.col) one(*a.col, *b.col, "_col", "N", "M");
  mark_nonfinite(r);
  return r;
}

OracleResult fp8_oracle(const std::vector<float>& x, int64_t M, int64_t N, const Fp8Config& cfg) {
  const Fp8Result a = fp8_quantize(x, M, N, cfg);
  const Fp8Result b = ref::fp8_quantize(x, M, N, cfg);
  OracleResult r;
  r.outputs.push_back(code_output("q", {"M", "N"}, {M, N}, cfg.fp8, a.codes));
  agree(r, "q", a.codes, b.codes, cfg.fp8);
  const Shape gs{a.scale_rows, a.scale_cols};
  auto vec = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  r.outputs.push_back(f32_output("scale_inv", {"MB", "NB"}, gs, vec(a.scale_inv), &a.scale_inv));
  r.agreement.push_back({"scale_inv", "kernel", "tensor", agreement_rel(vec(a.scale_inv), vec(b.scale_inv))});
  r.outputs.push_back(f32_output("scale", {"MB", "NB"}, gs, vec(a.scale), &a.scale));
  r.agreement.push_back({"scale", "kernel", "tensor", agreement_rel(vec(a.scale), vec(b.scale))});
  r.outputs.push_back(f32_output("amax", {"MB", "NB"}, gs, vec(a.amax), &a.amax));
  r.agreement.push_back({"amax", "kernel", "tensor", agreement_rel(vec(a.amax), vec(b.amax))});
  const auto ex = fp8_dequantize(a, cfg.fp8);
  r.outputs.push_back(f32_output("xhat", {"M", "N"}, {M, N}, ex, nullptr));
  r.agreement.push_back({"xhat", "kernel", "tensor", agreement_rel(ex, fp8_dequantize(b, cfg.fp8))});
  mark_nonfinite(r);
  return r;
}

OracleResult fp8_fake_quant_oracle(const std::vector<float>& x, const std::vector<float>& dy, int64_t M,
                                   int64_t N, const Fp8Config& cfg, bool clipped_ste) {
  const FakeQuantResult f = fp8_fake_quant(x, dy, M, N, cfg, clipped_ste);
  const Fp8Result b = ref::fp8_quantize(x, M, N, cfg);
  OracleResult r;
  r.outputs.push_back(f32_output("y", {"M", "N"}, {M, N}, f.y_exact, &f.y));
  r.agreement.push_back({"y", "kernel", "tensor", agreement_rel(f.y_exact, fp8_dequantize(b, cfg.fp8))});
  std::vector<double> dx(f.dx.begin(), f.dx.end());
  r.outputs.push_back(f32_output("dx", {"M", "N"}, {M, N}, dx, &f.dx));
  // STE from the tensor form: dy masked by |x*scale| <= max (clipped) or passed through.
  std::vector<double> dx2(dx.size());
  const double maxv = info(cfg.fp8).max_finite;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const int64_t k = i * N + j;
      const double xs = static_cast<double>(static_cast<float>(static_cast<double>(x[k]) *
                                                               b.scale[b.group_of(i, j)]));
      dx2[k] = (!clipped_ste || std::fabs(xs) <= maxv) ? dy[k] : 0.0;
    }
  r.agreement.push_back({"dx", "kernel", "tensor", agreement_rel(dx, dx2)});
  mark_nonfinite(r);
  return r;
}

OracleResult gemm_oracle(const ScaledOperand& a, const ScaledOperand& b, double alpha, DType out) {
  const GemmResult g1 = block_scaled_gemm(a, b, alpha);
  const GemmResult g2 = ref::block_scaled_gemm_eigen(a, b, alpha);
  OracleResult r;
  Output o;
  o.expected = Tensor{"d", {"M", "N"}, {g1.m, g1.n}, out, g1.d};
  o.bound = g1.bound;
  r.outputs.push_back(std::move(o));
  r.agreement.push_back({"d", "sequential", "eigen", agreement_rel(g2.d, g1.d)});
  mark_nonfinite(r);
  return r;
}

OracleResult swizzle_oracle(const std::vector<uint8_t>& compact, int64_t rows, int64_t cols) {
  const auto a = swizzle_scales(compact, rows, cols);
  const auto b = ref::swizzle_scales_permute(compact, rows, cols);
  ASSAY_CHECK(a == b, "swizzle: formula and permute forms differ");
  ASSAY_CHECK(unswizzle_scales(a, rows, cols) == compact, "swizzle: inverse failed");
  OracleResult r;
  r.outputs.push_back(code_output("sf_swizzled", {"S"}, {static_cast<int64_t>(a.size())}, DType::u8, a));
  r.agreement.push_back({"sf_swizzled", "formula", "permute", 0.0});
  mark_nonfinite(r);
  return r;
}

}  // namespace assay::quant
