// Golden assembly (see attention.h "Golden assembly"): both forms, their agreement, the outputs,
// bounds and intermediates as `assay gen` writes them.
#include <algorithm>
#include <cmath>

#include "reference/attention/attention.h"
#include "reference/core/check.h"

namespace assay::attention {

OracleResult oracle(const Params& p, const GoldenInputs& in, const GoldenOptions& opt) {
  ASSAY_INPUT_CHECK(!(in.dout && in.dlse), "attention: a backward of <dout, O> and of the LSE only are exclusive");
  const auto s = shapes(p);
  const auto& q = in.q;
  const auto& k = in.k;
  const auto& v = in.v;
  const auto& sink = in.sink;
  const auto a = forward_definitional(p, q, k, v, sink);
  const auto b = forward_online(p, q, k, v, sink);
  OracleResult r;
  r.agreement.push_back({"O", "definitional", "online", agreement_rel(b.o, a.o)});
  r.agreement.push_back({"LSE", "definitional", "online", agreement_rel(b.lse, a.lse)});
  // One split: the combine is the unsplit pass (attention.h), which form (b) then does not copy.
  const bool split = p.num_splits > 1;
  r.agreement.push_back({"O", "definitional", "online_split_combine", agreement_rel(split ? b.o_combined : b.o, a.o)});
  r.agreement.push_back(
      {"LSE", "definitional", "online_split_combine", agreement_rel(split ? b.lse_combined : b.lse, a.lse)});

  Output o;
  o.expected = Tensor{"O", s.o_axes, s.o, opt.o_dtype, a.o};
  o.bound = a.o_mag;
  r.outputs.push_back(std::move(o));
  Output l;
  l.expected = Tensor{"LSE", s.lse_axes, s.lse, DType::f32, a.lse};  // kernels store fp32 LSE
  l.bound = a.lse_mag;
  l.allow_nonfinite = std::any_of(a.lse.begin(), a.lse.end(), [](double x) { return !std::isfinite(x); });
  r.outputs.push_back(std::move(l));
  // Intermediates for bisection (golden size matters: O-sized ones only on request).
  // Split partials in fp32, as split-KV kernels keep them (FA's oaccum / softmax_lseaccum), with
  // their magnitudes as bounds: candidates may hand them back to be judged and bisected.
  if (split) {
    r.intermediates.push_back(Tensor{"LSE_partial", s.lse_partial_axes, s.lse_partial, DType::f32, b.lse_partial});
    r.intermediate_bounds["LSE_partial"] = b.lse_partial_mag;
    if (opt.store_o_partial) {
      r.intermediates.push_back(Tensor{"O_partial", s.o_partial_axes, s.o_partial, DType::f32, b.o_partial});
      r.intermediate_bounds["O_partial"] = b.o_partial_mag;
    }
  }
  if (opt.store_o_score_mag) r.intermediates.push_back(Tensor{"O_score_mag", s.o_axes, s.o, DType::f64, a.o_score_mag});

  if (in.dout || in.dlse) {
    const std::vector<double> zeros(a.o.size(), 0.0);
    const auto& dO = in.dout ? *in.dout : zeros;
    std::vector<double> dlse = in.dlse ? *in.dlse : std::vector<double>{};
    const auto ga = backward_definitional(p, q, k, v, sink, dO, dlse);
    const auto gb = backward_tiled(p, q, k, v, sink, b.o, b.lse, dO, dlse);
    r.agreement.push_back({"dQ", "definitional", "tiled", agreement_rel(gb.dq, ga.dq)});
    r.agreement.push_back({"dK", "definitional", "tiled", agreement_rel(gb.dk, ga.dk)});
    r.agreement.push_back({"dV", "definitional", "tiled", agreement_rel(gb.dv, ga.dv)});
    if (p.has_sink) r.agreement.push_back({"dSink", "definitional", "tiled", agreement_rel(gb.dsink, ga.dsink)});
    if (in.dlse)
      for (double x : ga.dv) ASSAY_CHECK(x == 0, "attention: the LSE-only loss gave dV != 0");
    auto add = [&](const char* name, const Shape& sh, const std::vector<std::string>& ax, DType dt,
                   const std::vector<double>& x, const std::vector<double>& m) {
      Output g;
      g.expected = Tensor{name, ax, sh, dt, x};
      g.bound = m;
      r.outputs.push_back(std::move(g));
    };
    add("dQ", s.q, s.q_axes, opt.dq_dtype, ga.dq, ga.dq_mag);
    add("dK", s.k, s.k_axes, opt.dk_dtype, ga.dk, ga.dk_mag);
    add("dV", s.v, s.v_axes, opt.dv_dtype, ga.dv, ga.dv_mag);
    if (p.has_sink) add("dSink", s.sink, s.sink_axes, DType::f32, ga.dsink, ga.dsink_mag);
  }
  return r;
}

}  // namespace assay::attention
