// Host side of kernels/attention/attention_params.h: launch parameters from a golden's tensors and
// case fields (never from tensor values: plugins and can_implement see none).
#include "kernels/common/kernel_support.h"
#include "kernels/attention/attention_params.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kernels/attention/attention_fwd.h"

namespace assay::kernels::attention {
namespace {

struct Fields {
  double scale = 0;
  bool has_scale = false, causal = false;
  int window_left = -1, window_right = -1;
  double softcap = 0;
  int page_size = 0, tile_n = 64, num_splits = 1;
  std::vector<double> seqlens_q, seqlens_k;
  int Sq = 0, Sk = 0;
};

Fields fields_of(const CaseFields& cp) {
  Fields f;
  f.has_scale = cp.has("scale");
  // Resolved fields (the golden's /case): the binding reads every one of these for every case,
  // with its defaults applied, so none is repeated here; scale is read only where the case sets it.
  f.scale = f.has_scale ? cp.get_double("scale") : 0.0;
  f.causal = cp.get_bool("causal");
  const auto w = cp.get_list("window");
  if (w.size() == 2) f.window_left = static_cast<int>(w[0]), f.window_right = static_cast<int>(w[1]);
  f.softcap = cp.get_double("softcap");
  f.page_size = static_cast<int>(cp.get_int("page_size"));
  f.tile_n = static_cast<int>(cp.get_int("tile_n"));
  f.num_splits = static_cast<int>(cp.get_int("num_splits"));
  f.seqlens_q = cp.get_list("seqlens_q");
  f.seqlens_k = cp.get_list("seqlens_k");
  f.Sq = static_cast<int>(cp.get_int("Sq"));
  f.Sk = static_cast<int>(cp.get_int("Sk"));
  return f;
}

// Shapes by tensor name, from either a Golden or a LaunchContext.
struct ShapeOf {
  std::vector<std::pair<std::string, Shape>> t;
  const Shape* get(const std::string& n) const {
    for (const auto& [name, s] : t)
      if (name == n) return &s;
    return nullptr;
  }
};

CaseDims dims_of(const ShapeOf& s, const Fields& f) {
  CaseDims d;
  const Shape* q = s.get("q");
  const Shape* k = s.get("k");
  const Shape* v = s.get("v");
  if (!q || !k || !v) return d;
  d.varlen_q = s.get("cu_seqlens_q") != nullptr;
  d.paged = s.get("block_table") != nullptr;
  d.packed_k = !d.paged && s.get("cu_seqlens_k") != nullptr;
  d.has_sink = s.get("sink") != nullptr;
  d.softcap = f.softcap > 0;
  d.causal = f.causal;
  d.window = f.window_left >= 0 || f.window_right >= 0;
  const auto r = [](const Shape* x, int i) { return static_cast<int>((*x)[static_cast<size_t>(i)]); };
  if (d.varlen_q) {  // [total_q, Hq, D]
    d.total_q = r(q, 0), d.Hq = r(q, 1), d.D = r(q, 2);
    d.B = static_cast<int>(s.get("cu_seqlens_q")->at(0)) - 1;
    for (double l : f.seqlens_q) d.max_seqlen_q = std::max(d.max_seqlen_q, static_cast<int>(l));
  } else {  // [B, Sq, Hq, D]
    d.B = r(q, 0), d.Sq = r(q, 1), d.Hq = r(q, 2), d.D = r(q, 3);
    d.total_q = d.B * d.Sq, d.max_seqlen_q = d.Sq;
  }
  const int kr = static_cast<int>(k->size());
  d.Hkv = r(k, kr - 2);
  d.Dv = r(v, static_cast<int>(v->size()) - 1);
  if (d.paged) {
    d.page_size = r(k, 1);
    const Shape* bt = s.get("block_table");
    d.Sk = d.page_size * static_cast<int>((*bt)[1]);
  } else if (d.packed_k) {
    d.Sk = 0;
  } else {
    d.Sk = r(k, 1);
  }
  if (!f.seqlens_k.empty()) {
    for (double l : f.seqlens_k) d.max_seqlen_k = std::max(d.max_seqlen_k, static_cast<int>(l));
  } else {
    d.max_seqlen_k = d.paged ? (f.Sk > 0 ? f.Sk : d.Sk) : d.Sk;
  }
  d.num_splits = std::max(1, f.num_splits);
  d.tile_n = std::max(1, f.tile_n);
  return d;
}

}  // namespace

CaseDims case_dims(const KernelCase& g) {
  ShapeOf s;
  for (const auto& t : g.inputs) s.t.emplace_back(t.name, t.shape);
  return dims_of(s, fields_of(g.fields));
}

Support forward_case_supported(const KernelCase& g) {
  for (const char* n : {"dQ", "dK", "dV", "dSink"})
    if (g.output(n)) return {false, "forward kernel: the case asks for gradients (backward)"};
  const TensorSpec *q = g.input("q"), *k = g.input("k"), *v = g.input("v");
  const TensorSpec *o = g.output("O"), *lse = g.output("LSE");
  if (!q || !k || !v || !o || !lse) return {false, "not a forward attention case (needs q, k, v -> O, LSE)"};
  if (q->dtype != DType::bf16 && q->dtype != DType::f16)
    return {false, fmt::format("q dtype {} (bf16 and fp16 only)", name(q->dtype))};
  if (k->dtype != q->dtype || v->dtype != q->dtype) return {false, "q, k and v differ in dtype"};
  if (o->dtype != q->dtype) return {false, fmt::format("O dtype {} differs from q's", name(o->dtype))};
  if (lse->dtype != DType::f32) return {false, "LSE is not fp32"};
  if (const TensorSpec* s = g.input("sink"); s && s->dtype != DType::f32) return {false, "sink is not fp32"};
  const CaseDims d = case_dims(g);
  if (d.Hkv <= 0 || d.Hq % d.Hkv != 0) return {false, fmt::format("Hq = {} is not a multiple of Hkv = {}", d.Hq, d.Hkv)};
  return {};
}

std::string build_params(const LaunchContext& c, AttnParams& p) {
  ShapeOf s;
  for (const auto& t : c.inputs) s.t.emplace_back(t.name, t.shape);
  const Fields f = fields_of(c.params);
  const CaseDims d = dims_of(s, f);
  const DevTensor *q = c.input("q"), *k = c.input("k"), *v = c.input("v"), *o = c.output("O"), *lse = c.output("LSE");
  if (!q || !k || !v || !o || !lse) return "attention: the case lacks q, k, v, O or LSE";
  p = AttnParams{};
  p.q = q->data, p.k = k->data, p.v = v->data, p.o = o->data, p.lse = static_cast<float*>(lse->data);
  if (const auto* t = c.input("sink")) p.sink = static_cast<const float*>(t->data);
  if (const auto* t = c.input("cu_seqlens_q")) p.cu_seqlens_q = static_cast<const int32_t*>(t->data);
  if (const auto* t = c.input("cu_seqlens_k"); t && !d.paged) p.cu_seqlens_k = static_cast<const int32_t*>(t->data);
  if (const auto* t = c.input("seqused_k")) p.seqused_k = static_cast<const int32_t*>(t->data);
  if (const auto* t = c.input("block_table")) {
    p.block_table = static_cast<const int32_t*>(t->data);
    p.pages_per_seq = static_cast<int>(t->shape.at(1));
  }
  // Paged without seqused_k / cu_seqlens_k: every sequence has the case's Sk keys.
  if (d.paged && !p.seqused_k) {
    if (const auto* t = c.input("cu_seqlens_k")) p.cu_seqlens_k = static_cast<const int32_t*>(t->data);
  }
  p.fp16 = q->dtype == DType::f16;
  p.B = d.B, p.Hq = d.Hq, p.Hkv = d.Hkv, p.D = d.D, p.Dv = d.Dv;
  p.Sq = d.Sq;
  p.Sk = d.paged ? (f.Sk > 0 ? f.Sk : d.Sk) : d.Sk;
  p.total_q = d.total_q;
  p.max_seqlen_q = d.max_seqlen_q, p.max_seqlen_k = d.max_seqlen_k;
  p.scale = static_cast<float>(f.has_scale ? f.scale : 1.0 / std::sqrt(static_cast<double>(d.D)));
  p.softcap = static_cast<float>(f.softcap);
  p.causal = f.causal;
  p.window_left = f.window_left, p.window_right = f.window_right;
  p.page_size = d.page_size;
  p.tile_n = d.tile_n;
  p.num_splits = d.num_splits;
  if (p.Hkv <= 0 || p.Hq % p.Hkv != 0) return fmt::format("attention: Hq = {} is not a multiple of Hkv = {}", p.Hq, p.Hkv);
  return {};
}

std::string run_split_kernel(LaunchContext& c, const char* name, int corrupt_split) {
  AttnParams p;
  if (std::string err = build_params(c, p); !err.empty()) return fmt::format("{}: {}", name, err);
  if (const DevTensor* t = c.intermediate("O_partial")) p.o_partial_export = static_cast<float*>(t->data);
  if (const DevTensor* t = c.intermediate("LSE_partial")) p.lse_partial_export = static_cast<float*>(t->data);
  p.corrupt_split = corrupt_split;
  const cudaError_t e = attention_fwd_v2_split(p, static_cast<cudaStream_t>(c.stream));
  return common::cuda_error(name, e);
}

}  // namespace assay::kernels::attention
