// Mamba-2 SSD goldens (ssd.h oracle(), ssd_backward.h add_backward()): both forms run, their
// agreement measured, and the result packaged as an OracleResult.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "reference/ssd/ssd.h"
#include "reference/ssd/ssd_backward.h"

namespace assay::ssd {

OracleResult oracle(const Params& params, const Inputs& in) {
  Params p = params;
  p.compute_bounds = true;
  const Result rec = recurrence(p, in);
  const Result chk = chunked(p, in);
  const int64_t B = in.batch, T = in.seqlen, H = in.nheads, P = in.headdim, N = in.dstate;
  const int64_t Q = p.chunk_size, NC = (T + Q - 1) / Q;
  const int64_t S = in.cu_seqlens.empty() ? 0 : static_cast<int64_t>(in.cu_seqlens.size()) - 1;
  OracleResult o;
  auto tensor = [](std::string name, std::vector<std::string> axes, Shape shape, DType dt,
                   std::vector<double> data) {
    Tensor t;
    t.name = std::move(name);
    t.axes = std::move(axes);
    t.shape = std::move(shape);
    t.dtype = dt;
    t.data = std::move(data);
    ASSAY_CHECK(numel(t.shape) == t.size(), "ssd: tensor {} size {} != {}", t.name, t.size(),
                shape_str(t.shape));
    return t;
  };
  auto agree = [&](const char* name, const std::vector<double>& a, const std::vector<double>& b,
                   int64_t q) {
    FormAgreement f;
    f.tensor = name;
    f.form_a = "recurrence";
    f.form_b = fmt::format("chunked(Q={})", q);
    f.max_rel = agreement_rel(b, a);
    o.agreement.push_back(f);
  };
  agree("out", rec.out, chk.out, p.chunk_size);
  agree("final_states", rec.final_states, chk.final_states, p.chunk_size);
  agree("chunk_states", rec.chunk_states, chk.chunk_states, p.chunk_size);
  if (!in.cu_seqlens.empty())
    agree("varlen_states", rec.varlen_states, chk.varlen_states, p.chunk_size);
  for (int64_t q : p.cross_check_chunk_sizes) {
    if (q == p.chunk_size) continue;
    Params pq = p;
    pq.chunk_size = q;
    pq.compute_bounds = false;
    const Result cq = chunked(pq, in);
    agree("out", rec.out, cq.out, q);
    agree("final_states", rec.final_states, cq.final_states, q);
  }

  Output out;
  out.expected = tensor("out", {"B", "T", "H", "P"}, {B, T, H, P}, p.out_dtype, rec.out);
  out.bound = rec.out_bound;
  o.outputs.push_back(std::move(out));
  Output fin;
  fin.expected = tensor("final_states", {"B", "H", "P", "N"}, {B, H, P, N}, p.state_dtype,
                        rec.final_states);
  fin.bound = rec.final_states_bound;
  o.outputs.push_back(std::move(fin));
  if (!in.cu_seqlens.empty()) {
    Output vs;
    vs.expected = tensor("varlen_states", {"seq", "H", "P", "N"}, {S, H, P, N},
                         p.state_dtype, rec.varlen_states);
    vs.bound = rec.varlen_states_bound;
    o.outputs.push_back(std::move(vs));
  }

  // chunk_states in the dtype the kernels store them in: _state_passing_fwd writes the chunk start
  // states in C.dtype (= x.dtype = out_dtype) for chunk_scan to read; bound packaged for bisection.
  o.intermediates.push_back(tensor("chunk_states", {"B", "chunk", "H", "P", "N"},
                                   {B, NC, H, P, N}, p.out_dtype, rec.chunk_states));
  o.intermediate_bounds["chunk_states"] = rec.chunk_states_bound;
  o.intermediates.push_back(
      tensor("dt_processed", {"B", "T", "H"}, {B, T, H}, DType::f64, rec.dt_processed));
  o.intermediates.push_back(tensor("dA_cumsum", {"B", "H", "chunk", "Q"}, {B, H, NC, Q},
                                   DType::f64, dA_cumsum(p, in, rec.dt_processed)));
  return o;
}

// ---------------------------------------------------------------------------------------------
// Backward.

std::map<std::string, std::vector<double>> grads_by_name(const Inputs& in, const Grads& g) {
  std::map<std::string, std::vector<double>> o{{"dx", g.dx}, {"ddt", g.ddt}, {"dA", g.dA}, {"dB", g.dB}, {"dC", g.dC}};
  if (!in.D.empty()) o["dD"] = g.dD;
  if (!in.z.empty()) o["dz"] = g.dz;
  if (!in.dt_bias.empty()) o["ddt_bias"] = g.ddt_bias;
  if (!in.initial_states.empty()) o["dinitial_states"] = g.dinitial_states;
  return o;
}

void add_backward(const Params& p, const Inputs& s, const std::vector<double>& dout,
                  const std::vector<double>& dfin, const std::vector<Tensor>& inputs, OracleResult& r) {
  using Out = std::map<std::string, std::vector<double>>;
  const Grads ga = backward_recurrent(p, s, dout, dfin);
  const Grads gb = backward_chunked(p, s, dout, dfin);
  const Grads bound = backward_bound(p, s, dout, dfin);
  const Out ea = grads_by_name(s, ga), eb = grads_by_name(s, gb), eb_bound = grads_by_name(s, bound);
  for (const auto& [name, v] : ea)
    r.agreement.push_back({name, "backward_recurrent", fmt::format("backward_chunked(Q={})", p.chunk_size),
                           agreement_rel(eb.at(name), v)});
  for (int64_t q : p.cross_check_chunk_sizes) {
    if (q == p.chunk_size) continue;
    Params pq = p;
    pq.chunk_size = q;
    const Out eq = grads_by_name(s, backward_chunked(pq, s, dout, dfin));
    for (const auto& [name, v] : ea)
      r.agreement.push_back({name, "backward_recurrent", fmt::format("backward_chunked(Q={})", q),
                             agreement_rel(eq.at(name), v)});
  }
  // Each gradient has its input's shape, axes and dtype (upstream returns them so).
  auto input_of = [&](const std::string& grad) -> const Tensor& {
    const std::string name = grad == "dinitial_states" ? std::string("initial_states") : grad.substr(1);
    const auto it = std::find_if(inputs.begin(), inputs.end(), [&](const Tensor& t) { return t.name == name; });
    ASSAY_CHECK(it != inputs.end(), "ssd: no input tensor {}", name);
    return *it;
  };
  for (const auto& [name, v] : ea) {
    const Tensor& x = input_of(name);
    Output o;
    o.expected = Tensor{name, x.axes, x.shape, x.dtype, v};
    o.bound = eb_bound.at(name);
    r.outputs.push_back(std::move(o));
  }
  const int64_t NC = (s.seqlen + p.chunk_size - 1) / p.chunk_size;
  r.intermediates.push_back(Tensor{"dstates", {"B", "chunk", "H", "P", "N"},
                                   {s.batch, NC, s.nheads, s.headdim, s.dstate}, DType::f64, gb.dstates});
}

}  // namespace assay::ssd
