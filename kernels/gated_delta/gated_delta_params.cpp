// Host side of kernels/gated_delta/gated_delta.h: what the recurrent kernel takes (can_implement
// reasons), and its launch parameters from a case's fields and tensors (never from tensor values:
// can_implement and plugins see none). Tensors: those of gated_delta.h.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/common/kernel_support.h"
#include "kernels/gated_delta/gated_delta.h"

namespace assay::kernels::gated_delta {
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

// The case fields the binding (fixtures/gated_delta.cpp) resolves, as the kernel reads them.
struct Fields {
  std::string mode, gate, beta_mode, layout;
  bool l2norm = false, backward = false, initial_state = true;
  int64_t chunk = 64;
  std::vector<double> cu;
};

Fields fields_of(const CaseFields& f) {
  Fields r;
  r.mode = f.get_string("mode", "prefill");
  r.gate = f.get_string("gate", "log");
  r.beta_mode = f.get_string("beta_mode", "given");
  r.layout = f.get_string("state_layout", "kv");
  r.l2norm = f.get_bool("qk_l2norm", false);
  r.backward = f.get_bool("backward", false);
  r.initial_state = f.get_bool("initial_state", true);
  r.chunk = f.get_int("chunk_size", 64);
  if (f.has_list("cu_seqlens")) r.cu = f.get_list("cu_seqlens");
  return r;
}

}  // namespace

Support recurrent_supported(const KernelCase& g) {
  const Fields f = fields_of(g.fields);
  if (f.backward) return no("forward kernel: backward cases need the gradients (dq, dk, dv, ...)");
  if (f.mode != "prefill" && f.mode != "decode") return no(fmt::format("mode '{}': this kernel runs prefill and decode only", f.mode));
  if (f.gate != "log" && f.gate != "none" && f.gate != "in_kernel") return no(fmt::format("gate '{}': this kernel takes log, none and in_kernel gates only", f.gate));
  if (f.beta_mode != "given" && f.beta_mode != "sigmoid" && f.beta_mode != "two_sigmoid")
    return no(fmt::format("beta_mode '{}': this kernel takes given, sigmoid and two_sigmoid only", f.beta_mode));
  if (f.layout != "kv" && f.layout != "vk") return no(fmt::format("state_layout '{}': this kernel takes kv and vk only", f.layout));
  if (f.chunk < 1) return no("chunk_size < 1");
  if (Support s = common::outputs_within(g, {"o", "final_state"}, "gated_delta_recurrent"); !s.ok) return s;
  for (const char* n : {"q", "k", "v", "beta"})
    if (!g.input(n)) return no(fmt::format("the golden has no input '{}'", n));
  for (const char* n : {"o", "final_state"})
    if (!g.output(n)) return no(fmt::format("the golden has no output '{}'", n));
  // Every tensor the kernel touches is fp32, bf16 or fp16 (cu_seqlens int64).
  std::vector<std::string> names = {"q", "k", "v", "beta", "o", "final_state"};
  for (const char* n : {"g", "A_log", "dt_bias", "initial_state"})
    if (g.input(n)) names.push_back(n);
  if (Support s = require_dtypes(g, names, {DType::f32, DType::bf16, DType::f16}); !s.ok) return s;
  if (const TensorSpec* cs = g.intermediate("chunk_states"); cs) {
    Elt e;
    if (!elt_of(cs->dtype, e)) return no(fmt::format("chunk_states is {}; this kernel writes fp32/bf16/fp16", name(cs->dtype)));
  }
  if ((f.gate == "none") != (g.input("g") == nullptr)) return no("gate field and the g input disagree");
  if (f.gate == "in_kernel" && !g.input("A_log")) return no("gate = in_kernel without A_log");
  const TensorSpec& q = *g.input("q");
  const TensorSpec& v = *g.input("v");
  if (q.shape.size() != 4 || v.shape.size() != 4) return no("q or v is not [B, T, heads, dim]");
  const int64_t B = q.shape[0], H = q.shape[2], K = q.shape[3], HV = v.shape[2], V = v.shape[3];
  if (K > kMaxK) return no(fmt::format("K = {} > {}: the state's rows live in one warp, at most 4 per lane", K, kMaxK));
  if (H < 1 || HV % H != 0) return no("HV is not a multiple of H");
  if (HV > 65535 || (V + 15) / 16 > 65535) return no("HV or V / 16 > 65535 (grid.y / grid.z)");
  const bool varlen = g.input("cu_seqlens") != nullptr;
  if (varlen != !f.cu.empty()) return no("the cu_seqlens field and input disagree");
  if (varlen && f.mode == "decode") return no("varlen decode: the decode path takes one sequence per batch row (cu_seqlens only in prefill)");
  if (varlen && B != 1) return no("varlen needs B == 1");
  const int64_t nseq = varlen ? static_cast<int64_t>(f.cu.size()) - 1 : B;
  if (nseq > 2147483647LL) return no("Nseq > 2^31 - 1 (grid.x)");
  if (f.mode == "decode") {
    if (g.output("final_state")->dtype != DType::f32)
      return no("decode keeps the state in final_state between steps: it must be fp32");
    if (q.shape[1] == 0) return no("decode with T = 0 (no step to launch)");
  }
  return {};
}

Support chunked_supported(const KernelCase& g) {
  if (Support s = recurrent_supported(g); !s.ok) return s;
  const Fields f = fields_of(g.fields);
  if (f.chunk != 16 && f.chunk != 32 && f.chunk != 64) return no(fmt::format("chunk_size = {}: the kernel is built for 16, 32 and 64", f.chunk));
  if (Support s = require_dtypes(g, {"q", "k", "v", "o"}, {DType::bf16}); !s.ok)
    return no("bf16-states kernel (bf16 tensor-core operands): " + s.reason);
  if (g.output("final_state")->dtype != DType::f32) return no("final_state must be fp32 (the carried state is fp32)");
  const int64_t K = g.input("q")->shape[3];
  if (K % 16 != 0) return no(fmt::format("K = {}: the mma k-step is 16", K));
  return {};
}

std::string build_params(const LaunchContext& c, Params& p) {
  const Fields f = fields_of(c.params);
  auto in = [&](const char* n, const void*& ptr, Elt& t) -> bool {
    const DevTensor* d = c.input(n);
    if (!d) return false;
    ptr = d->data;
    return elt_of(d->dtype, t);
  };
  Params r;
  if (!in("q", r.q, r.q_t) || !in("k", r.k, r.k_t) || !in("v", r.v, r.v_t) || !in("beta", r.beta, r.beta_t))
    return "q, k, v or beta missing or of an unsupported dtype";
  if (c.input("g") && !in("g", r.g, r.g_t)) return "g: unsupported dtype";
  if (c.input("A_log") && !in("A_log", r.A_log, r.A_log_t)) return "A_log: unsupported dtype";
  if (c.input("dt_bias") && !in("dt_bias", r.dt_bias, r.dt_bias_t)) return "dt_bias: unsupported dtype";
  if (c.input("initial_state") && !in("initial_state", r.h0, r.h0_t)) return "initial_state: unsupported dtype";
  if (const DevTensor* cu = c.input("cu_seqlens")) {
    if (cu->dtype != DType::i64) return "cu_seqlens is not int64";
    r.cu_seqlens = static_cast<const int64_t*>(cu->data);
  }
  const DevTensor* o = c.output("o");
  const DevTensor* ht = c.output("final_state");
  if (!o || !ht || !elt_of(o->dtype, r.o_t) || !elt_of(ht->dtype, r.ht_t)) return "o or final_state missing or unsupported";
  r.o = o->data, r.ht = ht->data;
  if (const DevTensor* cs = c.intermediate("chunk_states")) {
    if (!elt_of(cs->dtype, r.cs_t)) return "chunk_states: unsupported dtype";
    r.chunk_states = cs->data;
  }
  const DevTensor* q = c.input("q");
  const DevTensor* v = c.input("v");
  r.B = q->shape[0], r.T = q->shape[1], r.H = q->shape[2], r.K = q->shape[3];
  r.HV = v->shape[2], r.V = v->shape[3];
  r.Nseq = r.cu_seqlens ? static_cast<int64_t>(c.input("cu_seqlens")->shape[0]) - 1 : r.B;
  r.chunk = f.chunk;
  r.scale = static_cast<float>(c.params.has("scale") ? c.params.get_double("scale")
                                                     : 1.0 / std::sqrt(static_cast<double>(r.K)));
  r.gate = f.gate == "none" ? Gate::none : f.gate == "in_kernel" ? Gate::in_kernel : Gate::log;
  r.beta_mode = f.beta_mode == "sigmoid" ? Beta::sigmoid : f.beta_mode == "two_sigmoid" ? Beta::two_sigmoid : Beta::given;
  r.l2norm = f.l2norm;
  r.vk = f.layout == "vk";
  r.decode = f.mode == "decode";
  if (r.gate != Gate::none && !r.g) return "the case's gate needs g";
  if (r.gate == Gate::in_kernel && !r.A_log) return "gate = in_kernel needs A_log";
  p = r;
  return {};
}

CaseInfo case_info(const KernelCase& g) {
  const Fields f = fields_of(g.fields);
  CaseInfo ci;
  ci.decode = f.mode == "decode";
  ci.gate = f.gate == "none" ? Gate::none : f.gate == "in_kernel" ? Gate::in_kernel : Gate::log;
  ci.has_h0 = g.input("initial_state") != nullptr;
  ci.chunk = f.chunk;
  const TensorSpec* q = g.input("q");
  const int64_t B = q && q->shape.size() == 4 ? q->shape[0] : 0;
  ci.T = q && q->shape.size() == 4 ? q->shape[1] : 0;
  ci.varlen = !f.cu.empty();
  if (ci.varlen) {
    for (size_t i = 0; i + 1 < f.cu.size(); ++i) {
      ci.seq_starts.push_back(static_cast<int64_t>(f.cu[i]));
      ci.seq_lens.push_back(static_cast<int64_t>(f.cu[i + 1] - f.cu[i]));
    }
  } else {
    for (int64_t b = 0; b < B; ++b) ci.seq_starts.push_back(b * ci.T), ci.seq_lens.push_back(ci.T);
  }
  for (int64_t l : ci.seq_lens) ci.max_len = l > ci.max_len ? l : ci.max_len;
  return ci;
}

}  // namespace assay::kernels::gated_delta
