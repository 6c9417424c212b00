// Registration of the quant kernels (kernels/quant/quant_block.cu, quant_nvfp4_recipes.cu,
// quant_fp8.cu, quant_gemm.cu) with the registry.
//
//   quant_nvfp4_v1    recipe "nvfp4" (TE arithmetic): 1x16 or 16x16 (block_2d), rowwise and/or
//                     columnwise, amax overrides (amax_row / amax_col). Refuses torchao (ao), RHT, SR.
//   quant_nvfp4_recipes_v1  recipe "nvfp4", 1x16 only: TE round-to-nearest or SR (rbits_row /
//                     rbits_col), RHT of the columnwise operand (rht, rht_sign_mask), torchao (ao,
//                     ao_two_level, ao_cuda_div), amax overrides.
//   quant_mx_v1       recipe "mx": elem e4m3 / e5m2 / e2m1, rule floor / rceil, both directions.
//   quant_fp8_v1      recipe "fp8": e4m3 / e5m2, sat / nonsat, gran tensor / channel / 1x128 /
//                     128x128, scale te / deepgemm, pow2, amax override (tensor), epsilon.
//   quant_fp8_v2      the same recipe for gran 1x128 / 128x128 with N % 4 == 0 (vectorized).
//   quant_swizzle_v1  recipe "swizzle": the 128x4 scale-factor layout.
//   quant_fake_quant_v1  recipe "fake_quant": the fp8 fields (tensor / channel) + clipped_ste.
//   quant_gemm_v1     recipe "gemm": operands nvfp4 / mxfp8 / mxfp4 / deepseek / int, alpha. Inputs
//                     must be bf16 (x) / u8 (sf).
// Case fields are the golden's resolved ones (fixtures/quant.cpp reads them with its defaults):
// no default is repeated here; the amax overrides are read only where the case sets them.
#include <cuda_runtime.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels/quant/quant_kernels.h"
#include "kernels/common/kernel_support.h"
#include "kernels/registry.h"

namespace assay::kernels {
namespace {

using namespace assay::kernels::quant;
using namespace assay::kernels::common;


// A refusal unless the case's recipe is `recipe` ("recipe '<its recipe>' is not <what>").
Support recipe_is(const KernelCase& g, const std::string& recipe, const std::string& what) {
  const std::string r = g.fields.get_string("recipe");
  return r == recipe ? Support{} : no("recipe '" + r + "' is not " + what);
}

Support x_bf16(const KernelCase& g) {
  const TensorSpec* x = g.input("x");
  if (!x || x->shape.size() != 2) return no("the case lacks a 2-D input x");
  if (x->dtype != DType::bf16) return no("input x must be bf16 (got " + std::string(name(x->dtype)) + ")");
  return {};
}

// Launcher arguments (Nvfp4Args, MxArgs, Fp8Args) with the bf16 input x [M, N] filled in.
template <class Args>
Args args_of_x(const DevTensor& x) {
  Args a;
  a.x = static_cast<const uint16_t*>(x.data);
  a.M = x.shape[0];
  a.N = x.shape[1];
  return a;
}

// The direction suffixes a block quantizer's case asks for: "_row" (rowwise), "_col" (columnwise).
std::vector<std::string> directions(const CaseFields& p) {
  std::vector<std::string> d;
  if (p.get_int("rowwise") != 0) d.push_back("_row");
  if (p.get_int("columnwise") != 0) d.push_back("_col");
  return d;
}

// The per-direction outputs of a block quantizer (NVFP4, MX) in the directions the case asks for
// (rowwise, columnwise): q, packed, scale, xhat and NVFP4's amax; nullptr where the golden has none.
template <class Args>
void direction_outputs(LaunchContext& c, Args& a) {
  const bool row = c.params.get_int("rowwise") != 0, col = c.params.get_int("columnwise") != 0;
  auto u8 = [&c](bool on, const char* n) { return on ? output_ptr<uint8_t>(c, n) : nullptr; };
  auto f32 = [&c](bool on, const char* n) { return on ? output_ptr<float>(c, n) : nullptr; };
  a.q_row = u8(row, "q_row"), a.packed_row = u8(row, "packed_row"), a.scale_row = u8(row, "scale_row");
  a.xhat_row = f32(row, "xhat_row");
  a.q_col = u8(col, "q_col"), a.packed_col = u8(col, "packed_col"), a.scale_col = u8(col, "scale_col");
  a.xhat_col = f32(col, "xhat_col");
  if constexpr (requires { a.amax_row; }) a.amax_row = f32(row, "amax_row"), a.amax_col = f32(col, "amax_col");
}

// ------------------------------------------------------------------------------- NVFP4
// recipes = false: quant_nvfp4_v1 (the 64x64 tile kernel: TE round-to-nearest, 1x16 or 16x16).
// recipes = true: quant_nvfp4_recipes_v1 (block per thread: TE RN / SR, RHT columnwise, torchao;
// no 16x16 blocks).
KernelDef make_nvfp4(bool recipes) {
  KernelDef d = common::kernel_def(
      "quant", recipes ? "quant_nvfp4_recipes_v1" : "quant_nvfp4_v1",
      recipes ? "NVFP4 one thread per 16-element block from global memory: TE (round-to-nearest, or "
                "stochastic rounding from given random bytes), RHT of the columnwise operand (exact "
                "sum, bf16), torchao two-level / single-level; 1x16 blocks only"
              : "NVFP4 (TE arithmetic) 1x16 / 16x16 quantize, rowwise + columnwise from one 64x64 smem "
                "tile, deterministic integer-max amax, TE dequantize");
  d.can_implement = [recipes](const KernelCase& g) -> Support {
    if (auto s = recipe_is(g, "nvfp4", "NVFP4"); !s.ok) return s;
    const auto p = g.fields;
    const std::string self = recipes ? "quant_nvfp4_recipes_v1" : "quant_nvfp4_v1";
    const bool ao = p.get_int("ao") != 0, rht = p.get_int("rht") != 0, sr = p.get_int("sr") != 0;
    if (!recipes && (ao || rht || sr))
      return no("torchao, RHT and stochastic rounding are quant_nvfp4_recipes_v1's (the tile kernel is TE RN)");
    if (recipes && p.get_int("block_2d")) return no("16x16 blocks are quant_nvfp4_v1's");
    if (auto s = x_bf16(g); !s.ok) return s;
    const Shape& xs = g.input("x")->shape;
    if (!recipes && (xs[0] + 63) / 64 > 65535) return no("M too large for the tile grid (M <= 4194240)");
    if (recipes && rht && xs[0] % 16 != 0) return no("RHT needs M % 16 == 0");
    std::vector<std::pair<std::string, DType>> outs;
    for (const std::string& dir : directions(p)) {
      for (const auto& [n, dt] : {std::pair{"q", DType::e2m1}, std::pair{"packed", DType::u8},
                                  std::pair{"scale", DType::e4m3}, std::pair{"amax", DType::f32},
                                  std::pair{"xhat", DType::f32}})
        outs.push_back({n + dir, dt});
      if (sr) {
        const TensorSpec* rb = g.input("rbits" + dir);
        if (!rb || rb->dtype != DType::u8 || rb->numel() != xs[0] * xs[1])
          return no("SR needs the u8 input rbits" + dir + " with one byte per element");
      }
    }
    return exact_outputs(g, outs, self);
  };
  d.launch = [recipes](LaunchContext& c) -> std::string {
    const DevTensor* x = c.input("x");
    if (!x) return "quant_nvfp4: no input x";
    Nvfp4Args a = args_of_x<Nvfp4Args>(*x);
    a.block_2d = c.params.get_int("block_2d") != 0;
    direction_outputs(c, a);
    a.amax_row_given = c.params.has("amax_row");
    a.amax_row_value = a.amax_row_given ? static_cast<float>(c.params.get_double("amax_row")) : 0.0f;
    a.amax_col_given = c.params.has("amax_col");
    a.amax_col_value = a.amax_col_given ? static_cast<float>(c.params.get_double("amax_col")) : 0.0f;
    const auto st = static_cast<cudaStream_t>(c.stream);
    if (!recipes) return cuda_error("quant_nvfp4_v1", quant_nvfp4_v1(a, st));
    a.rht = c.params.get_int("rht") != 0;
    a.rht_sign_mask = static_cast<uint16_t>(c.params.get_int("rht_sign_mask"));
    if (c.params.get_int("sr") != 0) {
      const DevTensor *rr = c.input("rbits_row"), *rc = c.input("rbits_col");
      a.rbits_row = rr ? static_cast<const uint8_t*>(rr->data) : nullptr;
      a.rbits_col = rc ? static_cast<const uint8_t*>(rc->data) : nullptr;
    }
    a.ao = c.params.get_int("ao") != 0;
    a.ao_two_level = c.params.get_int("ao_two_level") != 0;
    a.ao_cuda_div = c.params.get_int("ao_cuda_div") != 0;
    return cuda_error("quant_nvfp4_recipes_v1", quant_nvfp4_recipes_v1(a, st));
  };
  return d;
}

// ------------------------------------------------------------------------------- MX
int mx_elem(const std::string& s) { return s == "e4m3" ? 0 : s == "e5m2" ? 1 : s == "e2m1" ? 2 : -1; }

KernelDef make_mx_v1() {
  KernelDef d = common::kernel_def("quant", "quant_mx_v1",
      "MXFP8 (E4M3/E5M2) / MXFP4 quantize with UE8M0 floor or RCEIL scales, rowwise 1x32 + columnwise 32x1 "
      "from one 64x64 smem tile; exact dequantize");
  d.can_implement = [](const KernelCase& g) -> Support {
    if (auto s = recipe_is(g, "mx", "MX"); !s.ok) return s;
    const auto p = g.fields;
    const std::string el = p.get_string("elem"), rule = p.get_string("rule");
    const int e = mx_elem(el);
    if (e < 0) return no("MX element '" + el + "' is outside this kernel (it takes e4m3, e5m2, e2m1)");
    if (rule != "floor" && rule != "rceil") return no("MX scale rule '" + rule + "' is outside this kernel");
    if (auto s = x_bf16(g); !s.ok) return s;
    if ((g.input("x")->shape[0] + 63) / 64 > 65535) return no("M too large for the tile grid (M <= 4194240)");
    const DType edt = e == 0 ? DType::e4m3 : e == 1 ? DType::e5m2 : DType::e2m1;
    std::vector<std::pair<std::string, DType>> outs;
    for (const std::string& dir : directions(p)) {
      outs.insert(outs.end(), {{"q" + dir, edt}, {"scale" + dir, DType::ue8m0}, {"xhat" + dir, DType::f32}});
      if (e == 2) outs.push_back({"packed" + dir, DType::u8});
    }
    return exact_outputs(g, outs, "quant_mx_v1");
  };
  d.launch = [](LaunchContext& c) -> std::string {
    const DevTensor* x = c.input("x");
    if (!x) return "quant_mx_v1: no input x";
    MxArgs a = args_of_x<MxArgs>(*x);
    a.elem = mx_elem(c.params.get_string("elem"));
    a.rceil = c.params.get_string("rule") == "rceil";
    direction_outputs(c, a);
    return cuda_error("quant_mx_v1", quant_mx_v1(a, static_cast<cudaStream_t>(c.stream)));
  };
  return d;
}

// ------------------------------------------------------------------------------- FP8
int fp8_gran(const std::string& s) {
  return s == "tensor" ? 0 : s == "channel" ? 1 : s == "1x128" ? 2 : s == "128x128" ? 3 : -1;
}

// The FP8 quantization settings of a case (recipe "fp8" or "fake_quant"), as quant_fp8_v1 reads them.
Fp8Args fp8_args(const CaseFields& p, const DevTensor* x) {
  Fp8Args a = args_of_x<Fp8Args>(*x);
  a.elem = p.get_string("elem") == "e5m2" ? 1 : 0;
  a.satfinite = p.get_string("overflow") == "sat";
  a.gran = fp8_gran(p.get_string("gran"));
  a.deepgemm = p.get_string("scale") == "deepgemm";
  a.pow2 = p.get_int("pow2") != 0;
  a.epsilon = static_cast<float>(p.get_double("epsilon"));
  a.amax_given = a.gran == 0 && p.has("amax");
  a.amax_value = a.amax_given ? static_cast<float>(p.get_double("amax")) : 0.0f;
  return a;
}

// The FP8 element, overflow rule and scale recipe are ones quant_fp8_v1 computes (recipes "fp8"
// and "fake_quant"; each checks its granularities itself).
Support fp8_settings(const CaseFields& p) {
  const std::string el = p.get_string("elem"), ov = p.get_string("overflow"), sc = p.get_string("scale");
  if (el != "e4m3" && el != "e5m2") return no("FP8 element '" + el + "' not supported");
  if (ov != "sat" && ov != "nonsat") return no("FP8 overflow '" + ov + "' not supported");
  if (sc != "te" && sc != "deepgemm") return no("FP8 scale recipe '" + sc + "' is outside this kernel");
  return {};
}

// v1: every granularity (the readable baseline); v2: DeepSeek 1x128 / 128x128 with N % 4 == 0,
// x read once with 8-byte lanes.
KernelDef make_fp8(int version) {
  KernelDef d = common::kernel_def(
      "quant", fmt::format("quant_fp8_v{}", version),
      version == 1 ? "FP8 E4M3/E5M2 scaling (TE current scaling or DeepGEMM casts) per tensor / channel / "
                     "1x128 / 128x128, deterministic amax, dequantize"
                   : "FP8 DeepSeek 1x128 (warp per group) and 128x128 (CTA per group, registers) casts, "
                     "x read once with 8-byte lanes, N % 4 == 0; the same bits as v1");
  d.can_implement = [version](const KernelCase& g) -> Support {
    if (auto s = recipe_is(g, "fp8", "FP8 scaling (fake_quant and gemm are outside this kernel)"); !s.ok) return s;
    const auto p = g.fields;
    if (auto s = fp8_settings(p); !s.ok) return s;
    const std::string el = p.get_string("elem"), gr = p.get_string("gran");
    if (fp8_gran(gr) < 0) return no("FP8 granularity '" + gr + "' is outside this kernel");
    if (auto s = x_bf16(g); !s.ok) return s;
    const Shape& xs = g.input("x")->shape;
    const int gi = fp8_gran(gr);
    const int64_t nr = gi == 0 ? 1 : gi == 1 || gi == 2 ? xs[0] : (xs[0] + 127) / 128;
    if (nr > 65535) return no("too many group rows for the grid (<= 65535)");
    if (version == 2 && !quant_fp8_v2_supports(gi, xs[1]))
      return no("quant_fp8_v2 takes gran 1x128 / 128x128 with N % 4 == 0 (v1 covers the rest)");
    return exact_outputs(g,
                         {{"q", el == "e4m3" ? DType::e4m3 : DType::e5m2}, {"scale_inv", DType::f32},
                          {"scale", DType::f32}, {"amax", DType::f32}, {"xhat", DType::f32}},
                         version == 1 ? "quant_fp8_v1" : "quant_fp8_v2");
  };
  d.launch = [version](LaunchContext& c) -> std::string {
    const DevTensor* x = c.input("x");
    if (!x) return "quant_fp8: no input x";
    Fp8Args a = fp8_args(c.params, x);
    a.q = output_ptr<uint8_t>(c, "q");
    a.scale_inv = output_ptr<float>(c, "scale_inv");
    a.scale = output_ptr<float>(c, "scale");
    a.amax = output_ptr<float>(c, "amax");
    a.xhat = output_ptr<float>(c, "xhat");
    const auto st = static_cast<cudaStream_t>(c.stream);
    return version == 1 ? cuda_error("quant_fp8_v1", quant_fp8_v1(a, st)) : cuda_error("quant_fp8_v2", quant_fp8_v2(a, st));
  };
  return d;
}

// ------------------------------------------------------------------------------- fake quant
KernelDef make_fake_quant_v1() {
  KernelDef d = common::kernel_def("quant", "quant_fake_quant_v1",
      "FP8 QAT fake-quant per tensor / per channel: quant_fp8_v1 into scratch, then y = fl(decode(q) * "
      "scale_inv) and the (clipped) straight-through gradient");
  d.can_implement = [](const KernelCase& g) -> Support {
    if (auto s = recipe_is(g, "fake_quant", "fake_quant"); !s.ok) return s;
    const auto p = g.fields;
    if (auto s = fp8_settings(p); !s.ok) return s;
    const std::string gr = p.get_string("gran");
    if (gr != "tensor" && gr != "channel") return no("fake-quant granularity is tensor or channel");
    if (auto s = x_bf16(g); !s.ok) return s;
    const TensorSpec* dy = g.input("dy");
    if (!dy || dy->dtype != DType::f32 || dy->numel() != g.input("x")->numel()) return no("the case lacks dy [M, N] f32");
    if (g.input("x")->shape[0] > 65535 && gr == "channel") return no("too many rows for the grid (<= 65535)");
    return exact_outputs(g, {{"y", DType::f32}, {"dx", DType::f32}}, "quant_fake_quant_v1");
  };
  d.launch = [](LaunchContext& c) -> std::string {
    const DevTensor *x = c.input("x"), *dy = c.input("dy");
    if (!x || !dy) return "quant_fake_quant_v1: missing inputs";
    FakeQuantArgs a;
    a.q = fp8_args(c.params, x);
    a.dy = static_cast<const float*>(dy->data);
    a.clipped_ste = c.params.get_int("clipped_ste") != 0;
    a.y = output_ptr<float>(c, "y");
    a.dx = output_ptr<float>(c, "dx");
    return cuda_error("quant_fake_quant_v1", quant_fake_quant_v1(a, static_cast<cudaStream_t>(c.stream)));
  };
  return d;
}

// ------------------------------------------------------------------------------- GEMM
int gemm_v(const std::string& ops) { return ops == "deepseek" ? 128 : (ops == "mxfp8" || ops == "mxfp4") ? 32 : 16; }
int gemm_elem_type(DType t) { return t == DType::e2m1 ? 0 : t == DType::e4m3 ? 1 : t == DType::e5m2 ? 2 : -1; }
int gemm_scale_type(DType t) { return t == DType::e4m3 ? 0 : t == DType::ue8m0 ? 1 : t == DType::f32 ? 2 : -1; }

KernelDef make_gemm_v1() {
  KernelDef d = common::kernel_def("quant", "quant_gemm_v1",
      "block-scaled GEMM (NVFP4, MXFP8/MXFP4, DeepSeek FP8 1x128 x 128x128), one thread per output, "
      "fp32 FMA accumulation, fp32 or bf16 output");
  d.can_implement = [](const KernelCase& g) -> Support {
    if (auto s = recipe_is(g, "gemm", "the block-scaled gemm"); !s.ok) return s;
    const auto p = g.fields;
    const std::string ops = p.get_string("operands");
    const TensorSpec *a = g.input("a"), *b = g.input("b"), *sa = g.input("sa"), *sb = g.input("sb");
    if (!a || !b || !sa || !sb || a->shape.size() != 2 || b->shape.size() != 2 || sa->shape.size() != 2 ||
        sb->shape.size() != 2)
      return no("the case lacks 2-D inputs a, b, sa, sb");
    if (a->dtype != b->dtype || gemm_elem_type(a->dtype) < 0) return no("a and b must share an e2m1 / e4m3 / e5m2 dtype");
    if (sa->dtype != sb->dtype || gemm_scale_type(sa->dtype) < 0) return no("sa and sb must share an e4m3 / ue8m0 / f32 dtype");
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[0], V = gemm_v(ops), kb = (K + V - 1) / V;
    if (b->shape[1] != K) return no("a and b disagree on K");
    if (sa->shape != Shape{M, kb}) return no("sa must be [M, ceil(K/V)]");
    const bool blk = ops == "deepseek";
    if (sb->shape != (blk ? Shape{(N + 127) / 128, kb} : Shape{N, kb})) return no("sb has the wrong shape for the operands");
    if (ops == "nvfp4") {
      const TensorSpec* al = g.input("alpha");
      if (!al || al->dtype != DType::f32 || al->numel() != 1) return no("NVFP4 needs the input alpha [1] f32");
    }
    const TensorSpec* o = g.output("d");
    if (!o || (o->dtype != DType::f32 && o->dtype != DType::bf16)) return no("output d must be f32 or bf16");
    if (o->shape != Shape{M, N}) return no("output d must be [M, N]");
    return outputs_within(g, {"d"}, "quant_gemm_v1");
  };
  d.launch = [](LaunchContext& c) -> std::string {
    const DevTensor *a = c.input("a"), *b = c.input("b"), *sa = c.input("sa"), *sb = c.input("sb"), *dd = c.output("d");
    if (!a || !b || !sa || !sb || !dd) return "quant_gemm_v1: missing tensors";
    const std::string ops = c.params.get_string("operands");
    GemmArgs g;
    g.a = static_cast<const uint8_t*>(a->data);
    g.b = static_cast<const uint8_t*>(b->data);
    g.sa = sa->data;
    g.sb = sb->data;
    g.M = a->shape[0];
    g.K = a->shape[1];
    g.N = b->shape[0];
    g.V = gemm_v(ops);
    g.elem_type = gemm_elem_type(a->dtype);
    g.scale_type = gemm_scale_type(sa->dtype);
    g.sb_block128 = ops == "deepseek";
    g.alpha = static_cast<float>(c.params.get_double("alpha"));
    if (ops == "nvfp4") {
      const DevTensor* al = c.input("alpha");
      g.alpha_dev = al ? static_cast<const float*>(al->data) : nullptr;
    }
    g.d = dd->data;
    g.d_bf16 = dd->dtype == DType::bf16;
    return cuda_error("quant_gemm_v1", quant_gemm_v1(g, static_cast<cudaStream_t>(c.stream)));
  };
  return d;
}

// ------------------------------------------------------------------------------- swizzle
KernelDef make_swizzle_v1() {
  KernelDef d = common::kernel_def("quant", "quant_swizzle_v1",
      "128x4 scale-factor swizzle (cuBLAS / TE gemm_swizzled_scale_idx layout), zero padding");
  d.can_implement = [](const KernelCase& g) -> Support {
    if (auto s = recipe_is(g, "swizzle", "the standalone swizzle"); !s.ok) return s;
    const TensorSpec* sf = g.input("sf");
    if (!sf || sf->shape.size() != 2 || sf->dtype != DType::u8) return no("the case lacks a 2-D u8 input sf");
    if (auto s = need_outputs(g, {"sf_swizzled"}, DType::u8); !s.ok) return s;
    const TensorSpec* o = g.output("sf_swizzled");
    const int64_t want = (sf->shape[0] + 127) / 128 * 128 * ((sf->shape[1] + 3) / 4 * 4);
    if (o->shape.size() != 1 || o->shape[0] != want) return no("sf_swizzled has an unexpected size");
    return outputs_within(g, {"sf_swizzled"}, "quant_swizzle_v1");
  };
  d.launch = [](LaunchContext& c) -> std::string {
    const DevTensor* sf = c.input("sf");
    const DevTensor* out = c.output("sf_swizzled");
    if (!sf || !out) return "quant_swizzle_v1: the case lacks sf or sf_swizzled";
    return cuda_error("quant_swizzle_v1",
                       quant_swizzle_v1(static_cast<const uint8_t*>(sf->data), sf->shape[0], sf->shape[1],
                                        static_cast<uint8_t*>(out->data), static_cast<cudaStream_t>(c.stream)));
  };
  return d;
}

}  // namespace
ASSAY_REGISTER_KERNEL(make_nvfp4(false));
ASSAY_REGISTER_KERNEL(make_nvfp4(true));
ASSAY_REGISTER_KERNEL(make_mx_v1());
ASSAY_REGISTER_KERNEL(make_fp8(1));
ASSAY_REGISTER_KERNEL(make_fp8(2));
ASSAY_REGISTER_KERNEL(make_swizzle_v1());
ASSAY_REGISTER_KERNEL(make_fake_quant_v1());
ASSAY_REGISTER_KERNEL(make_gemm_v1());
}  // namespace assay::kernels
