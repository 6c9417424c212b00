// Mamba-3 golden assembly (mamba3.h siso_oracle / mimo_oracle): both forms on the validated
// problem, their measured agreement (also at the extra chunk sizes), and the result packaged as
// OracleResult. Values are the step form's (the ground truth).
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "reference/mamba3/mamba3.h"
#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3 {

namespace {

using detail::Problem;

// Agreement of angles modulo 2pi: a is moved by a multiple of 2pi to the nearest of b first.
double angle_agreement(std::vector<double> a, const std::vector<double>& b) {
  if (a.size() != b.size()) return agreement_rel(a, b);
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    a[i] -= detail::kTwoPi * std::round(d / detail::kTwoPi);
  }
  return agreement_rel(a, b);
}

// The step-vs-chunked agreements the goldens record, in their order: the tensor, whether it is
// compared modulo 2pi (angle_agreement), and whether the extra chunk sizes record it too.
struct Agreed {
  const char* name;
  std::vector<double> Result::*f;
  bool circular, extra;
};
constexpr Agreed kAgreed[] = {
    {"out", &Result::out, false, true},
    {"out_bound", &Result::out_bound, false, true},
    {"out_pregate", &Result::out_pregate, false, false},
    {"final_angle", &Result::final_angle, true, true},
    {"final_ssm", &Result::final_ssm, false, true},
    {"final_ssm_bound", &Result::final_ssm_bound, false, false},
    {"final_ssm_rot_bound", &Result::final_ssm_rot_bound, false, false},
    {"final_k", &Result::final_k, false, true},
    {"final_k_bound", &Result::final_k_bound, false, false},
    {"final_angle_bound", &Result::final_angle_bound, false, false},
    {"final_v", &Result::final_v, false, false},
    {"chunk_states", &Result::chunk_states, false, false},
    {"chunk_states_bound", &Result::chunk_states_bound, false, false},
};

// The agreement of the chunked result ch (form `form`) with the step result st on every tensor of
// kAgreed (extra_only: those the extra chunk sizes record).
void add_agreements(const Result& st, const Result& ch, const std::string& form, bool extra_only, OracleResult& o) {
  for (const Agreed& a : kAgreed) {
    if (extra_only && !a.extra) continue;
    const double v = a.circular ? angle_agreement(ch.*(a.f), st.*(a.f)) : agreement_rel(ch.*(a.f), st.*(a.f));
    o.agreement.push_back({a.name, "step", form, v});
  }
}

OracleResult assemble(const Problem& pb, const Result& st, const Result& ch, DType out_dtype,
                      bool varlen) {
  OracleResult o;
  const std::string ns_axis = varlen ? "NS" : "B";
  const int64_t NS = pb.NS();
  auto add = [&](std::string name, std::vector<std::string> axes, Shape shape, DType dt,
                 const std::vector<double>& val, const std::vector<double>* bound) {
    Output out;
    out.expected = Tensor{std::move(name), std::move(axes), std::move(shape), dt, val};
    if (bound) out.bound = *bound;
    o.outputs.push_back(std::move(out));
  };
  if (pb.mimo && !pb.phi)  // MIMO without the down-projection keeps the rank axis
    add("out", {"B", "T", "R", "H", "P"}, {pb.B, pb.T, pb.R, pb.H, pb.P}, out_dtype, st.out, &st.out_bound);
  else
    add("out", {"B", "T", "H", "P"}, {pb.B, pb.T, pb.H, pb.P}, out_dtype, st.out, &st.out_bound);
  add("final_angle", {ns_axis, "H", "A"}, {NS, pb.H, pb.S}, DType::f32, st.final_angle, &st.final_angle_bound);
  add("final_ssm", {ns_axis, "H", "P", "N"}, {NS, pb.H, pb.P, pb.N}, DType::f32, st.final_ssm,
      &st.final_ssm_bound);
  if (!pb.mimo) o.outputs.back().bound2 = st.final_ssm_rot_bound;  // only the SISO kernel stores bf16 angles
  if (pb.mimo)
    add("final_k", {ns_axis, "R", "H", "N"}, {NS, pb.R, pb.H, pb.N}, out_dtype, st.final_k, &st.final_k_bound);
  else
    add("final_k", {ns_axis, "H", "N"}, {NS, pb.H, pb.N}, DType::f32, st.final_k, &st.final_k_bound);
  add("final_v", {ns_axis, "H", "P"}, {NS, pb.H, pb.P}, out_dtype, st.final_v, nullptr);

  // The kernels' chunk-state dtype (mamba3.h): SISO SSM_States is allocated bf16; the MIMO kernel
  // holds its running state in fp32 (no stored copy).
  const DType cs_dtype = pb.mimo ? DType::f32 : DType::bf16;
  o.intermediates.push_back(
      Tensor{"chunk_states", {"C", "H", "P", "N"}, {pb.NC(), pb.H, pb.P, pb.N}, cs_dtype, st.chunk_states});
  o.intermediate_bounds["chunk_states"] = st.chunk_states_bound;
  std::vector<double> starts(st.chunk_start.begin(), st.chunk_start.end());
  o.intermediates.push_back(Tensor{"chunk_start", {"C"}, {pb.NC()}, DType::i64, starts});
  // out_pregate stays out of the goldens (R x the output size); it is in Result and its agreement
  // is checked below.

  add_agreements(st, ch, "chunked", /*extra_only=*/false, o);
  return o;
}

// The chunked form again at other chunk sizes, against the step form.
void extra_chunks(const Problem& pb, const Result& st, const std::vector<int64_t>& sizes, OracleResult& o) {
  for (int64_t q : sizes) {
    Problem pq = pb;
    detail::set_chunk(pq, q);
    const Result ch = detail::run_chunked(pq);
    add_agreements(st, ch, fmt::format("chunked(Q={})", q), /*extra_only=*/true, o);
  }
}

// Both variants: the step and chunked forms of one problem, assembled.
template <class Params, class In>
OracleResult oracle_of(const Params& p, const In& in) {
  const Problem pb = detail::make_problem(p, in);
  const Result st = detail::run_step(pb);
  OracleResult o = assemble(pb, st, detail::run_chunked(pb), p.out_dtype, !p.cu_seqlens.empty());
  extra_chunks(pb, st, p.extra_chunk_sizes, o);
  return o;
}

}  // namespace

OracleResult siso_oracle(const SisoParams& p, const SisoInputs& in) { return oracle_of(p, in); }
OracleResult mimo_oracle(const MimoParams& p, const MimoInputs& in) { return oracle_of(p, in); }

}  // namespace assay::mamba3
