// Gated delta rule goldens: both forms run, their agreement measured and the result packaged as
// an OracleResult (gated_delta.h run(), add_decode_agreement(); gated_delta_backward.h
// add_backward()).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/gated_delta/gated_delta_backward.h"

namespace assay::gated_delta {

OracleResult run(const Params& p, const Inputs& in, DType o_dtype, DType chunk_state_dtype) {
  ASSAY_INPUT_CHECK(!p.emulate_h_dtype && !p.emulate_intermediate_dtype,
                    "gated_delta: emulate_* are calibration knobs, not for goldens");
  const Result a = recurrent(p, in);
  const Result b = chunked(p, in);
  const bool varlen = !p.cu_seqlens.empty();
  const std::string nax = varlen ? "Nseq" : "B";
  const std::string k_ax = p.state_layout == StateLayout::kv ? "K" : "V";
  const std::string v_ax = p.state_layout == StateLayout::kv ? "V" : "K";
  const int64_t s2 = p.state_layout == StateLayout::kv ? p.K : p.V;
  const int64_t s3 = p.state_layout == StateLayout::kv ? p.V : p.K;
  OracleResult res;
  Output o;
  o.expected = Tensor{"o", {"B", "T", "HV", "V"}, {p.B, p.T, p.HV, p.V}, o_dtype, a.o};
  o.bound = a.o_bound;
  res.outputs.push_back(std::move(o));
  Output fs;
  fs.expected = Tensor{"final_state", {nax, "HV", k_ax, v_ax}, {a.num_seqs, p.HV, s2, s3}, DType::f32, a.final_state};
  fs.bound = a.final_state_bound;
  res.outputs.push_back(std::move(fs));
  res.intermediates.push_back(
      Tensor{"chunk_states", {"NC", "HV", k_ax, v_ax}, {a.num_chunks, p.HV, s2, s3}, chunk_state_dtype, a.chunk_states});
  res.intermediate_bounds["chunk_states"] = a.chunk_states_bound;
  res.agreement.push_back({"o", "recurrent", "chunked", agreement_rel(b.o, a.o)});
  res.agreement.push_back({"final_state", "recurrent", "chunked", agreement_rel(b.final_state, a.final_state)});
  res.agreement.push_back({"chunk_states", "recurrent", "chunked", agreement_rel(b.chunk_states, a.chunk_states)});
  return res;
}

void add_decode_agreement(const Params& p, const Inputs& x, OracleResult& r) {
  const int64_t N = p.B, T = p.T, H = p.H, HV = p.HV, K = p.K, V = p.V;
  DecodeParams dp;
  static_cast<Options&>(dp) = static_cast<const Options&>(p);
  dp.N = N, dp.H = H, dp.HV = HV, dp.K = K, dp.V = V;
  std::vector<double> state = x.initial_state.empty() ? std::vector<double>(N * HV * K * V, 0.0) : x.initial_state;
  std::vector<double> o(N * T * HV * V);
  auto tok = [&](const std::vector<double>& a, int64_t t, int64_t per) {
    std::vector<double> y;
    for (int64_t n = 0; n < N; ++n) y.insert(y.end(), a.begin() + (n * T + t) * per, a.begin() + (n * T + t + 1) * per);
    return y;
  };
  for (int64_t t = 0; t < T; ++t) {
    DecodeInputs di;
    di.q = tok(x.q, t, H * K), di.k = tok(x.k, t, H * K), di.v = tok(x.v, t, HV * V);
    if (!x.g.empty()) di.g = tok(x.g, t, HV);
    di.beta = tok(x.beta, t, HV);
    di.A_log = x.A_log, di.dt_bias = x.dt_bias, di.state = state;
    const DecodeResult d = decode_step(dp, di);
    state = d.state;
    for (int64_t n = 0; n < N; ++n)
      std::copy(d.o.begin() + n * HV * V, d.o.begin() + (n + 1) * HV * V, o.begin() + (n * T + t) * HV * V);
  }
  const Result ch = chunked(p, x);
  r.agreement.push_back({"o", "decode_step", "chunked", agreement_rel(ch.o, o)});
  r.agreement.push_back({"final_state", "decode_step", "chunked", agreement_rel(ch.final_state, state)});
}

// ---------------------------------------------------------------------------------------------
// Backward.

namespace {

// Each gradient's input.
const std::map<std::string, std::string>& grad_inputs() {
  static const std::map<std::string, std::string> m{{"dq", "q"},   {"dk", "k"},      {"dv", "v"},
                                                    {"dg", "g"},   {"db", "beta"},   {"dh0", "initial_state"},
                                                    {"dA_log", "A_log"}, {"ddt_bias", "dt_bias"}};
  return m;
}

const std::vector<double>& input_data(const Inputs& in, const std::string& name) {
  if (name == "q") return in.q;
  if (name == "k") return in.k;
  if (name == "v") return in.v;
  if (name == "g") return in.g;
  if (name == "beta") return in.beta;
  if (name == "initial_state") return in.initial_state;
  if (name == "A_log") return in.A_log;
  return in.dt_bias;
}

// The case's input tensor of that name (the golden reads its axes, shape and dtype).
const Tensor& input_tensor(const std::vector<Tensor>& inputs, const std::string& name) {
  const auto it = std::find_if(inputs.begin(), inputs.end(), [&](const Tensor& t) { return t.name == name; });
  ASSAY_CHECK(it != inputs.end(), "gated_delta: no input tensor {}", name);
  return *it;
}

}  // namespace

std::map<std::string, std::vector<double>> grads_by_name(const Inputs& in, const Grads& g) {
  std::map<std::string, std::vector<double>> all{{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}, {"dg", g.dg}, {"db", g.dbeta},
          {"dh0", g.dinitial_state}, {"dA_log", g.dA_log}, {"ddt_bias", g.ddt_bias}};
  std::map<std::string, std::vector<double>> o;
  for (auto& [name, v] : all)
    if (!input_data(in, grad_inputs().at(name)).empty()) o[name] = std::move(v);
  return o;
}

void add_backward(const Params& p, const Inputs& x, const std::vector<double>& d_o,
                  const std::vector<double>& dht, const std::vector<Tensor>& inputs,
                  OracleResult& r) {
  using Out = std::map<std::string, std::vector<double>>;
  const Grads ga = backward_recurrent(p, x, d_o, dht);
  const Grads bound = backward_bound(p, x, d_o, dht);
  const Out ea = grads_by_name(x, ga), eb_bound = grads_by_name(x, bound);
  std::vector<int64_t> sizes{p.chunk_size};
  for (int64_t q : {int64_t{1}, int64_t{16}, int64_t{64}, p.T})
    if (q >= 1 && (q != p.T || p.T <= 1024) && std::find(sizes.begin(), sizes.end(), q) == sizes.end()) sizes.push_back(q);
  for (const int64_t q : sizes) {
    Params pq = p;
    pq.chunk_size = q;
    const Grads gq = backward_chunked(pq, x, d_o, dht);
    const Out eq = grads_by_name(x, gq);
    for (const auto& [name, v] : ea)
      r.agreement.push_back({name, "backward_recurrent", fmt::format("backward_chunked(Q={})", q),
                             agreement_rel(eq.at(name), v)});
    if (q == p.chunk_size)  // dh lives on the case's chunk grid
      r.agreement.push_back({"dh", "backward_recurrent", fmt::format("backward_chunked(Q={})", q), agreement_rel(gq.dh, ga.dh)});
  }
  // Each gradient has its input's axes, shape and dtype (fla returns them so).
  for (const auto& [name, v] : ea) {
    const Tensor& t = input_tensor(inputs, grad_inputs().at(name));
    Output o;
    o.expected = Tensor{name, t.axes, t.shape, t.dtype, v};
    o.bound = eb_bound.at(name);
    r.outputs.push_back(std::move(o));
  }
  const bool kv = p.state_layout == StateLayout::kv;
  const int64_t NC = static_cast<int64_t>(ga.dh.size()) / (p.HV * p.K * p.V);
  r.intermediates.push_back(Tensor{"dh", {"NC", "HV", kv ? "K" : "V", kv ? "V" : "K"},
                                   {NC, p.HV, kv ? p.K : p.V, kv ? p.V : p.K}, input_tensor(inputs, "q").dtype, ga.dh});
  r.intermediate_bounds["dh"] = bound.dh;
}

}  // namespace assay::gated_delta
