// Mamba-3 public entry points: input validation and the SISO/MIMO -> Problem mapping (the golden
// assembly, both forms and their agreement: mamba3_golden.cpp). Semantics: mamba3.h.
#include "reference/mamba3/mamba3.h"

#include <cmath>

#include "reference/core/check.h"
#include "reference/mamba3/mamba3_internal.h"

namespace assay::mamba3 {

namespace detail {

void set_chunk(Problem& pb, int64_t q) {
  ASSAY_INPUT_CHECK(q >= 1, "mamba3: chunk_size={} must be >= 1", q);
  pb.chunk = q;
  pb.chunk_off.assign(1, 0);
  for (int64_t len : pb.seq_len) pb.chunk_off.push_back(pb.chunk_off.back() + (len + q - 1) / q);
}

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
using detail::set_chunk;

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

// The fields both variants' parameters name alike.
template <class Params>
Problem common_dims(const Params& p) {
  Problem pb;
  pb.B = p.B;
  pb.T = p.T;
  pb.H = p.H;
  pb.G = p.G;
  pb.N = p.N;
  pb.P = p.P;
  pb.chunk = p.chunk_size;
  return pb;
}

Problem siso_problem(const SisoParams& p, const SisoInputs& in) {
  Problem pb = common_dims(p);
  pb.R = 1;
  pb.S = p.S;
  pb.pairing = detail::Pairing::adjacent;
  pb.mimo = false;
  setup_sequences(pb, p.cu_seqlens);
  bind_common(pb, in);
  return pb;
}

Problem mimo_problem(const MimoParams& p, const MimoInputs& in) {
  Problem pb = common_dims(p);
  pb.R = p.R;
  ASSAY_INPUT_CHECK(p.rotary_dim_divisor == 2 || p.rotary_dim_divisor == 4,
                    "mamba3: rotary_dim_divisor must be 2 or 4 (got {})", p.rotary_dim_divisor);
  ASSAY_INPUT_CHECK(p.N > 0 && p.N % p.rotary_dim_divisor == 0,
                    "mamba3: N={} must be a multiple of rotary_dim_divisor={}", p.N, p.rotary_dim_divisor);
  pb.S = p.S();
  pb.pairing = p.rotate_pairwise ? detail::Pairing::adjacent : detail::Pairing::half_split;
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

}  // namespace assay::mamba3
