// Mamba-3 public entry points: input validation, the SISO/MIMO -> Problem mapping, and the
// OracleResult assembly (both forms, measured agreement). Semantics: mamba3.h.
#include "reference/mamba3/mamba3.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3 {

namespace detail {

Result make_result(const Problem& pb) {
  Result r;
  const int64_t NS = pb.NS();
  r.out.assign(pb.out_size(), 0.0);
  r.out_bound.assign(pb.out_size(), 0.0);
  r.out_pregate.assign(pb.B * pb.T * pb.R * pb.H * pb.P, 0.0);
  r.final_angle.assign(NS * pb.H * pb.S, 0.0);
  r.final_angle_bound.assign(NS * pb.H * pb.S, 0.0);
  r.final_ssm.assign(NS * pb.H * pb.P * pb.N, 0.0);
  r.final_ssm_bound.assign(NS * pb.H * pb.P * pb.N, 0.0);
  r.final_ssm_rot_bound.assign(NS * pb.H * pb.P * pb.N, 0.0);
  r.final_k.assign(NS * pb.R * pb.H * pb.N, 0.0);
  r.final_k_bound.assign(NS * pb.R * pb.H * pb.N, 0.0);
  r.final_v.assign(NS * pb.H * pb.P, 0.0);
  r.chunk_states.assign(pb.NC() * pb.H * pb.P * pb.N, 0.0);
  r.chunk_states_bound.assign(pb.NC() * pb.H * pb.P * pb.N, 0.0);
  for (int64_t n = 0; n < NS; ++n)
    for (int64_t c = pb.chunk_off[n]; c < pb.chunk_off[n + 1]; ++c) {
      r.chunk_seq.push_back(n);
      r.chunk_start.push_back(pb.seq_start[n] + (c - pb.chunk_off[n]) * pb.chunk);
    }
  return r;
}

}  // namespace detail

namespace {

using detail::Problem;

void check_size(const std::vector<double>& x, int64_t n, const char* name, bool allow_neg_inf = false) {
  ASSAY_INPUT_CHECK(static_cast<int64_t>(x.size()) == n, "mamba3: {} has {} values, expected {}", name,
                    x.size(), n);
  for (double v : x)
    ASSAY_INPUT_CHECK(std::isfinite(v) || (allow_neg_inf && v == -HUGE_VAL), "mamba3: {} holds a non-finite value",
                      name);
}
const double* opt(const std::vector<double>& x, int64_t n, const char* name) {
  if (x.empty()) return nullptr;
  check_size(x, n, name);
  return x.data();
}

void set_chunk(Problem& pb, int64_t q) {
  ASSAY_INPUT_CHECK(q >= 1, "mamba3: chunk_size={} must be >= 1", q);
  pb.chunk = q;
  pb.chunk_off.assign(1, 0);
  for (int64_t len : pb.seq_len) pb.chunk_off.push_back(pb.chunk_off.back() + (len + q - 1) / q);
}

// Common dimension checks and sequence layout. Requires pb.{B,T,H,G,N,P,R,S,chunk,pairing} set.
void setup_sequences(Problem& pb, const std::vector<int64_t>& cu) {
  ASSAY_INPUT_CHECK(pb.B >= 1 && pb.T >= 0 && pb.H >= 1 && pb.G >= 1 && pb.P >= 1 && pb.R >= 1,
                    "mamba3: bad dimensions B={} T={} H={} G={} P={} R={}", pb.B, pb.T, pb.H, pb.G, pb.P,
                    pb.R);
  ASSAY_INPUT_CHECK(pb.H % pb.G == 0, "mamba3: H={} is not a multiple of the q/k heads G={}", pb.H, pb.G);
  ASSAY_INPUT_CHECK(pb.N >= 2 && pb.N % 2 == 0, "mamba3: N={} must be even and >= 2", pb.N);
  ASSAY_INPUT_CHECK(pb.chunk >= 1, "mamba3: chunk_size={} must be >= 1", pb.chunk);
  ASSAY_INPUT_CHECK(pb.S >= 0, "mamba3: negative angle dims");
  if (pb.pairing == detail::Pairing::adjacent)
    ASSAY_INPUT_CHECK(2 * pb.S <= pb.N, "mamba3: {} angle dims need 2S <= N={}", pb.S, pb.N);
  else
    ASSAY_INPUT_CHECK(pb.S <= pb.N / 2, "mamba3: {} angle dims need S <= N/2={}", pb.S, pb.N / 2);
  if (cu.empty()) {
    for (int64_t b = 0; b < pb.B; ++b) {
      pb.seq_row.push_back(b);
      pb.seq_start.push_back(0);
      pb.seq_len.push_back(pb.T);
    }
  } else {
    ASSAY_INPUT_CHECK(pb.B == 1, "mamba3: cu_seqlens needs B == 1 (got {})", pb.B);
    ASSAY_INPUT_CHECK(cu.size() >= 2 && cu.front() == 0 && cu.back() == pb.T,
                      "mamba3: cu_seqlens must start at 0 and end at T={}", pb.T);
    for (size_t i = 0; i + 1 < cu.size(); ++i) {
      ASSAY_INPUT_CHECK(cu[i + 1] >= cu[i], "mamba3: cu_seqlens must be non-decreasing");
      pb.seq_row.push_back(0);
      pb.seq_start.push_back(cu[i]);
      pb.seq_len.push_back(cu[i + 1] - cu[i]);
    }
  }
  set_chunk(pb, pb.chunk);
}

// Shared by SISO and MIMO: time-major inputs and states (layouts already R-aware).
template <class In>
void bind_common(Problem& pb, const In& in) {
  const int64_t B = pb.B, T = pb.T, H = pb.H, G = pb.G, N = pb.N, P = pb.P, R = pb.R, S = pb.S;
  const int64_t NS = pb.NS();
  check_size(in.q, B * T * R * G * N, "Q");
  check_size(in.k, B * T * R * G * N, "K");
  check_size(in.v, B * T * H * P, "V");
  check_size(in.adt, B * H * T, "ADT", /*allow_neg_inf=*/true);  // -inf: a full reset
  check_size(in.dt, B * H * T, "DT");
  check_size(in.trap, B * H * T, "Trap");
  check_size(in.q_bias, H * R * N, "Q_bias");
  check_size(in.k_bias, H * R * N, "K_bias");
  check_size(in.angles, B * T * H * S, "Angles");
  for (double a : in.adt) ASSAY_INPUT_CHECK(a <= 0.0, "mamba3: ADT must be <= 0 (got {})", a);
  for (double d : in.dt) ASSAY_INPUT_CHECK(d >= 0.0, "mamba3: DT must be >= 0 (got {})", d);
  pb.q = in.q.data();
  pb.k = in.k.data();
  pb.v = in.v.data();
  pb.adt = in.adt.data();
  pb.dt = in.dt.data();
  pb.trap = in.trap.data();
  pb.q_bias = in.q_bias.data();
  pb.k_bias = in.k_bias.data();
  pb.angles = in.angles.data();
  pb.d = opt(in.d, H, "D");
  pb.z = opt(in.z, B * T * H * P, "Z");
  const int n_states = int(!in.angle_state.empty()) + int(!in.ssm_state.empty()) +
                       int(!in.k_state.empty()) + int(!in.v_state.empty());
  ASSAY_INPUT_CHECK(n_states == 0 || n_states == 4,
                    "mamba3: input states are all four (angle, ssm, k, v) or none (got {})", n_states);
  pb.init_angle = opt(in.angle_state, NS * H * S, "angle_state");
  pb.init_ssm = opt(in.ssm_state, NS * H * P * N, "ssm_state");
  pb.init_k = opt(in.k_state, NS * R * H * N, "k_state");
  pb.init_v = opt(in.v_state, NS * H * P, "v_state");
}

Problem siso_problem(const SisoParams& p, const SisoInputs& in) {
  Problem pb;
  pb.B = p.B;
  pb.T = p.T;
  pb.H = p.H;
  pb.G = p.G;
  pb.N = p.N;
  pb.P = p.P;
  pb.R = 1;
  pb.S = p.S;
  pb.pairing = detail::Pairing::adjacent;
  pb.chunk = p.chunk_size;
  pb.mimo = false;
  setup_sequences(pb, p.cu_seqlens);
  bind_common(pb, in);
  return pb;
}

Problem mimo_problem(const MimoParams& p, const MimoInputs& in) {
  Problem pb;
  pb.B = p.B;
  pb.T = p.T;
  pb.H = p.H;
  pb.G = p.G;
  pb.N = p.N;
  pb.P = p.P;
  pb.R = p.R;
  ASSAY_INPUT_CHECK(p.rotary_dim_divisor == 2 || p.rotary_dim_divisor == 4,
                    "mamba3: rotary_dim_divisor must be 2 or 4 (got {})", p.rotary_dim_divisor);
  ASSAY_INPUT_CHECK(p.N > 0 && p.N % p.rotary_dim_divisor == 0,
                    "mamba3: N={} must be a multiple of rotary_dim_divisor={}", p.N, p.rotary_dim_divisor);
  pb.S = p.S();
  pb.pairing = p.rotate_pairwise ? detail::Pairing::adjacent : detail::Pairing::half_split;
  pb.chunk = p.chunk_size;
  pb.fused_norm = p.fused_norm;
  pb.norm_eps = p.norm_eps;
  pb.mimo = true;
  ASSAY_INPUT_CHECK(p.norm_eps >= 0 && std::isfinite(p.norm_eps), "mamba3: bad norm_eps {}", p.norm_eps);
  setup_sequences(pb, p.cu_seqlens);
  bind_common(pb, in);
  const int64_t H = pb.H, R = pb.R, P = pb.P;
  check_size(in.psi, H * R * P, "MIMO_V (psi)");
  pb.psi = in.psi.data();
  pb.zeta = opt(in.zeta, H * R * P, "MIMO_Z (zeta)");
  pb.phi = opt(in.phi, H * R * P, "MIMO_Out (phi)");
  pb.norm_w = opt(in.norm_weight, H * P, "outproj_norm_weight");
  ASSAY_INPUT_CHECK((pb.z == nullptr) == (pb.zeta == nullptr), "mamba3: Z and MIMO_Z come together");
  if (p.fused_norm) {
    ASSAY_INPUT_CHECK(pb.z && pb.zeta, "mamba3: fused_norm requires Z and MIMO_Z");
    ASSAY_INPUT_CHECK(pb.phi, "mamba3: fused_norm requires MIMO_Out (contract_mimo_out)");
  } else {
    ASSAY_INPUT_CHECK(pb.norm_w == nullptr, "mamba3: outproj_norm_weight given without fused_norm");
  }
  return pb;
}

// Agreement of angles modulo 2pi: a is moved by a multiple of 2pi to the nearest of b first.
double angle_agreement(std::vector<double> a, const std::vector<double>& b) {
  if (a.size() != b.size()) return agreement_rel(a, b);
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    a[i] -= detail::kTwoPi * std::round(d / detail::kTwoPi);
  }
  return agreement_rel(a, b);
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
  if (pb.phi)
    add("out", {"B", "T", "H", "P"}, {pb.B, pb.T, pb.H, pb.P}, out_dtype, st.out, &st.out_bound);
  else if (pb.mimo)
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

  auto agree = [&](const char* name, double v) { o.agreement.push_back({name, "step", "chunked", v}); };
  agree("out", agreement_rel(ch.out, st.out));
  agree("out_bound", agreement_rel(ch.out_bound, st.out_bound));
  agree("out_pregate", agreement_rel(ch.out_pregate, st.out_pregate));
  agree("final_angle", angle_agreement(ch.final_angle, st.final_angle));
  agree("final_ssm", agreement_rel(ch.final_ssm, st.final_ssm));
  agree("final_ssm_bound", agreement_rel(ch.final_ssm_bound, st.final_ssm_bound));
  agree("final_ssm_rot_bound", agreement_rel(ch.final_ssm_rot_bound, st.final_ssm_rot_bound));
  agree("final_k", agreement_rel(ch.final_k, st.final_k));
  agree("final_k_bound", agreement_rel(ch.final_k_bound, st.final_k_bound));
  agree("final_angle_bound", agreement_rel(ch.final_angle_bound, st.final_angle_bound));
  agree("final_v", agreement_rel(ch.final_v, st.final_v));
  agree("chunk_states", agreement_rel(ch.chunk_states, st.chunk_states));
  agree("chunk_states_bound", agreement_rel(ch.chunk_states_bound, st.chunk_states_bound));
  return o;
}

// The chunked form again at other chunk sizes, against the step form.
void extra_chunks(const Problem& pb, const Result& st, const std::vector<int64_t>& sizes, OracleResult& o) {
  for (int64_t q : sizes) {
    Problem pq = pb;
    set_chunk(pq, q);
    const Result ch = detail::run_chunked(pq);
    const std::string form = fmt::format("chunked(Q={})", q);
    auto agree = [&](const char* name, double v) { o.agreement.push_back({name, "step", form, v}); };
    agree("out", agreement_rel(ch.out, st.out));
    agree("out_bound", agreement_rel(ch.out_bound, st.out_bound));
    agree("final_angle", angle_agreement(ch.final_angle, st.final_angle));
    agree("final_ssm", agreement_rel(ch.final_ssm, st.final_ssm));
    agree("final_k", agreement_rel(ch.final_k, st.final_k));
  }
}

}  // namespace

namespace detail {
Problem make_problem(const SisoParams& p, const SisoInputs& in) { return siso_problem(p, in); }
Problem make_problem(const MimoParams& p, const MimoInputs& in) { return mimo_problem(p, in); }
}  // namespace detail

Result siso_step(const SisoParams& p, const SisoInputs& in) { return detail::run_step(siso_problem(p, in)); }
Result siso_chunked(const SisoParams& p, const SisoInputs& in) {
  return detail::run_chunked(siso_problem(p, in));
}
Result mimo_step(const MimoParams& p, const MimoInputs& in) { return detail::run_step(mimo_problem(p, in)); }
Result mimo_chunked(const MimoParams& p, const MimoInputs& in) {
  return detail::run_chunked(mimo_problem(p, in));
}

OracleResult siso_oracle(const SisoParams& p, const SisoInputs& in) {
  const Problem pb = siso_problem(p, in);
  const Result st = detail::run_step(pb);
  OracleResult o = assemble(pb, st, detail::run_chunked(pb), p.out_dtype, !p.cu_seqlens.empty());
  extra_chunks(pb, st, p.extra_chunk_sizes, o);
  return o;
}
OracleResult mimo_oracle(const MimoParams& p, const MimoInputs& in) {
  const Problem pb = mimo_problem(p, in);
  const Result st = detail::run_step(pb);
  OracleResult o = assemble(pb, st, detail::run_chunked(pb), p.out_dtype, !p.cu_seqlens.empty());
  extra_chunks(pb, st, p.extra_chunk_sizes, o);
  return o;
}

}  // namespace assay::mamba3
