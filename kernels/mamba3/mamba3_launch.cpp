// Host side of kernels/mamba3/mamba3.h: which cases the chunked forward takes (can_implement
// reasons) and its launch parameters from a case's fields and tensors (never from tensor values:
// can_implement and plugins see none). Tensors: those of mamba3.h.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/common/kernel_support.h"
#include "kernels/mamba3/mamba3.h"

namespace assay::kernels::mamba3 {
namespace {

using common::no;

bool elt_of(DType d, Elt& e) {
  switch (d) {
    case DType::f32: e = Elt::f32; return true;
    case DType::bf16: e = Elt::bf16; return true;
    case DType::f16: e = Elt::f16; return true;
    default: return false;
  }
}

const char* const kInputs[] = {"Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "Angles", "D", "Z",
                               "MIMO_V", "MIMO_Z", "MIMO_Out", "outproj_norm_weight", "Angle_State",
                               "SSM_State", "K_State", "V_State"};
const char* const kOutputs[] = {"out", "final_angle", "final_ssm", "final_k", "final_v"};

}  // namespace

Support fwd_supported(const KernelCase& g, bool mimo) {
  const CaseFields& f = g.fields;
  const std::string kname = mimo ? "mamba3_mimo_chunked" : "mamba3_siso_chunked";
  if (f.get_bool("backward", false)) return no("forward kernel: backward cases need the gradients (dQ, dK, dV, ...)");
  const std::string variant = f.get_string("variant", "");
  if (variant != (mimo ? "mimo" : "siso"))
    return no(fmt::format("{} variant: this kernel runs {} cases", variant, mimo ? "MIMO" : "SISO"));
  if (Support s = common::outputs_within(g, {kOutputs, kOutputs + 5}, kname); !s.ok) return s;
  for (const char* n : kOutputs)
    if (!g.output(n)) return no(fmt::format("the golden has no output '{}'", n));
  for (const char* n : {"Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "Angles"})
    if (!g.input(n)) return no(fmt::format("the golden has no input '{}'", n));
  if (mimo && !g.input("MIMO_V")) return no("MIMO without MIMO_V");
  std::vector<std::string> names(kOutputs, kOutputs + 5);
  for (const char* n : kInputs)
    if (g.input(n)) names.push_back(n);
  if (Support s = require_dtypes(g, names, {DType::f32, DType::bf16, DType::f16}); !s.ok) return s;
  if (const TensorSpec* cu = g.input("cu_seqlens"); cu && cu->dtype != DType::i32) return no("cu_seqlens is not int32");
  if (const TensorSpec* cs = g.intermediate("chunk_states"); cs) {
    Elt e;
    if (!elt_of(cs->dtype, e)) return no(fmt::format("chunk_states is {}; this kernel writes fp32 / bf16 / fp16", name(cs->dtype)));
  }
  const TensorSpec& q = *g.input("Q");
  const TensorSpec& v = *g.input("V");
  if (q.shape.size() != (mimo ? 5u : 4u) || v.shape.size() != 4) return no("Q or V does not have the documented rank");
  const int64_t H = v.shape[2], P = v.shape[3], N = q.shape.back(), G = q.shape[q.shape.size() - 2];
  const int64_t R = mimo ? q.shape[2] : 1;
  const int64_t S = g.input("Angles")->shape[3];
  const int64_t L = f.get_int("chunk_size", mimo ? 64 / R : 64);
  if (L < 1) return no("chunk_size < 1");
  if (H % G != 0) return no("H is not a multiple of G");
  if (mimo && f.get_bool("fused_norm", false) && !g.input("Z")) return no("fused norm without Z");
  const int64_t bytes = smem_floats(N, P, L, R, S) * 4;
  if (bytes > kMaxSmemBytes)
    return no(fmt::format("N = {}, P = {}, chunk {} x rank {}: {} bytes of shared memory per CTA > {} (fp32 state and tiles)",
                          N, P, L, R, bytes, kMaxSmemBytes));
  if (H > 65535) return no("H > 65535 (grid.y)");
  return {};
}

std::string build_params(const LaunchContext& c, Params& p) {
  Params r;
  const CaseFields& f = c.params;
  auto in = [&](const char* n, Ten& t) -> bool {
    const DevTensor* d = c.input(n);
    if (!d) return true;  // absent: null
    t.p = d->data;
    return elt_of(d->dtype, t.t);
  };
  for (auto [n, t] : {std::pair<const char*, Ten*>{"Q", &r.q}, {"K", &r.k}, {"V", &r.v}, {"ADT", &r.adt}, {"DT", &r.dt},
                      {"Trap", &r.trap}, {"Q_bias", &r.q_bias}, {"K_bias", &r.k_bias}, {"Angles", &r.angles},
                      {"D", &r.d}, {"Z", &r.z}, {"MIMO_V", &r.psi}, {"MIMO_Z", &r.zeta}, {"MIMO_Out", &r.phi},
                      {"outproj_norm_weight", &r.norm_w}, {"Angle_State", &r.angle_state},
                      {"SSM_State", &r.ssm_state}, {"K_State", &r.k_state}, {"V_State", &r.v_state}})
    if (!in(n, *t)) return fmt::format("{}: unsupported dtype", n);
  auto out = [&](const char* n, Ten& t) -> bool {
    const DevTensor* d = c.output(n);
    if (!d) return false;
    t.p = d->data;
    return elt_of(d->dtype, t.t);
  };
  for (auto [n, t] : {std::pair<const char*, Ten*>{"out", &r.out}, {"final_angle", &r.final_angle},
                      {"final_ssm", &r.final_ssm}, {"final_k", &r.final_k}, {"final_v", &r.final_v}})
    if (!out(n, *t)) return fmt::format("{}: missing or of an unsupported dtype", n);
  if (const DevTensor* cs = c.intermediate("chunk_states")) {
    r.chunk_states.p = cs->data;
    if (!elt_of(cs->dtype, r.chunk_states.t)) return "chunk_states: unsupported dtype";
  }
  if (!r.q.p || !r.k.p || !r.v.p || !r.adt.p || !r.dt.p || !r.trap.p || !r.q_bias.p || !r.k_bias.p || !r.angles.p)
    return "a required input is missing";
  r.mimo = f.get_string("variant", "") == "mimo";
  const DevTensor* q = c.input("Q");
  const DevTensor* v = c.input("V");
  r.B = static_cast<int>(v->shape[0]), r.T = static_cast<int>(v->shape[1]), r.H = static_cast<int>(v->shape[2]);
  r.P = static_cast<int>(v->shape[3]);
  r.N = static_cast<int>(q->shape.back());
  r.G = static_cast<int>(q->shape[q->shape.size() - 2]);
  r.R = r.mimo ? static_cast<int>(q->shape[2]) : 1;
  r.S = static_cast<int>(c.input("Angles")->shape[3]);
  r.L = static_cast<int>(f.get_int("chunk_size", r.mimo ? 64 / r.R : 64));
  r.half_split = r.mimo && !f.get_bool("rotate_pairwise", false);
  r.fused_norm = r.mimo && f.get_bool("fused_norm", false);
  r.eps = static_cast<float>(f.get_double("norm_eps", 1e-5));
  if (const DevTensor* cu = c.input("cu_seqlens")) {
    if (cu->dtype != DType::i32) return "cu_seqlens is not int32";
    r.cu = static_cast<const int32_t*>(cu->data);
    r.NS = static_cast<int>(cu->shape[0]) - 1;
  } else {
    r.NS = r.B;
  }
  p = r;
  return {};
}

CaseInfo case_info(const KernelCase& g) {
  const CaseFields& f = g.fields;
  CaseInfo ci;
  ci.mimo = f.get_string("variant", "") == "mimo";
  const TensorSpec* q = g.input("Q");
  const TensorSpec* v = g.input("V");
  ci.R = ci.mimo && q && q->shape.size() == 5 ? q->shape[2] : 1;
  ci.L = f.get_int("chunk_size", ci.mimo ? 64 / ci.R : 64);
  ci.has_states = g.input("SSM_State") != nullptr;
  std::vector<double> cu;
  if (f.has_list("cu_seqlens")) cu = f.get_list("cu_seqlens");
  ci.varlen = cu.size() >= 2;
  std::vector<int64_t> lens;
  if (ci.varlen) {
    for (size_t i = 0; i + 1 < cu.size(); ++i) {
      lens.push_back(static_cast<int64_t>(cu[i + 1] - cu[i]));
      if (cu[i + 1] == cu[i] && cu[i] > 0) ci.empty_after_nonempty_row = true;
    }
  } else if (v && v->shape.size() == 4) {
    lens.push_back(v->shape[1]);
  }
  for (int64_t l : lens) {
    ci.max_len = l > ci.max_len ? l : ci.max_len;
    const int64_t nc = ci.L > 0 ? (l + ci.L - 1) / ci.L : 0;
    ci.max_chunks = nc > ci.max_chunks ? nc : ci.max_chunks;
  }
  return ci;
}

}  // namespace assay::kernels::mamba3
