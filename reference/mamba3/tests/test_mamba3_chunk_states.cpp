// Mamba-3 forward oracle tests (3/3): the deliberate bugs and emulation knobs in the oracle's own
// metric, chunk start states localizing a bug, and the chunk-state bounds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "catch_compat.h"
#include "reference/core/check.h"
#include "reference/core/tensor.h"
#include "reference/mamba3/mamba3.h"
#include "reference/mamba3/mamba3_internal.h"
#include "reference/mamba3/tests/mamba3_test_util.h"

using namespace assay;
using namespace assay::mamba3;
using namespace assay::mamba3::test;

// -----------------------------------------------------------------------------------------------
// Mutants and emulation knobs in the oracle's own metric (agreement_rel vs the step form). Whether
// the tolerance policy rejects every mutant and accepts every emulation is judged by
// `assay calibrate --op mamba3` (fixtures/mamba3.cpp variants; CTest calibrate.mamba3).
// -----------------------------------------------------------------------------------------------

namespace {

void round_bf16(std::vector<double>& x) {
  for (auto& e : x) e = round_to(DType::bf16, e);
}

}  // namespace

TEST_CASE("Mutants: every deliberate bug moves the output away from the step form", "[cpu][L0]") {
  using detail::Variant;
  const std::vector<Variant> mutants = {Variant::no_intra,         Variant::no_diag,
                                        Variant::diag_same_rank_only, Variant::shifted_reset_at_chunk,
                                        Variant::no_state_passing, Variant::no_chunk_decay,
                                        Variant::wrong_pairing,    Variant::double_sigmoid,
                                        Variant::row_mask};
  SisoParams sp{.T = 130, .H = 2, .N = 16, .P = 16, .S = 8, .chunk_size = 16};
  const Opts so{.states = true};
  SisoInputs si = make_siso(sp, 606, so);
  MimoParams mp{.T = 65, .H = 2, .N = 16, .P = 32, .R = 4, .chunk_size = 16};
  MOpts mo;
  MimoInputs mi = make_mimo(mp, 607, mo);
  const std::vector<detail::Problem> problems = {detail::make_problem(sp, si), detail::make_problem(mp, mi)};
  std::vector<Result> gold;
  for (const auto& pb : problems) gold.push_back(detail::run_step(pb));
  for (size_t k = 0; k < problems.size(); ++k)  // the exact chunked form is the step form
    CHECK(agreement_rel(detail::run_chunked(problems[k]).out, gold[k].out) < kFormAgreement);
  for (const auto m : mutants) {
    double worst = 0;
    for (size_t k = 0; k < problems.size(); ++k) {
      auto pb = problems[k];
      pb.variant = m;
      worst = std::max(worst, agreement_rel(detail::run_chunked(pb).out, gold[k].out));
    }
    INFO("mutant " << static_cast<int>(m));
    CHECK(worst > 1e-6);  // far outside the fp64 form agreement
  }
}

TEST_CASE("bf16 angle path: stored angles are bf16 values within half an ulp of the exact ones", "[cpu][L0]") {
  SisoParams sp{.T = 200, .H = 2, .N = 16, .P = 8, .S = 8, .chunk_size = 64};
  const Opts so{.states = true};
  SisoInputs si = make_siso(sp, 611, so);
  round_bf16(si.angles);
  auto pb = detail::make_problem(sp, si);
  const Result exact = detail::run_chunked(pb);
  pb.bf16_angles = true;
  const Result r = detail::run_chunked(pb);
  for (size_t i = 0; i < r.final_angle.size(); ++i) {
    const double a = r.final_angle[i], e = exact.final_angle[i];
    CHECK(a == round_to(DType::bf16, a));
    double d = std::fabs(a - e);
    d = std::min(d, 2 * kPi - d);  // circular
    // half a bf16 ulp of a value in [0, 2pi) is at most 2^-6, plus the fp32 cumsum's rounding
    CHECK(d <= 0x1p-6 + 1e-4);
  }
  // The rotations see the rounded angles: the output moves, V (copied) does not.
  CHECK(agreement_rel(r.out, exact.out) > 0);
  CHECK(r.final_v == exact.final_v);
}

TEST_CASE("Chunk start states localize a chunking bug to its first bad chunk", "[cpu][L0]") {
  // The shifted-term-reset mutant drops (1 - lambda_{t0}) DT_{t0} v_{t0-1} k_{t0-1}^T at every chunk
  // start t0 = cQ > 0: chunk 0's start state is still right, chunk 1's is the first wrong one.
  SisoParams p{.T = 70, .H = 1, .N = 8, .P = 4, .S = 4, .chunk_size = 16};
  Opts o;
  auto in = make_siso(p, 71, o);
  auto pb = detail::make_problem(p, in);
  const Result gold = detail::run_step(pb);
  pb.variant = detail::Variant::shifted_reset_at_chunk;
  const Result bad = detail::run_chunked(pb);
  const int64_t per = p.P * p.N;
  int64_t first_bad = -1;
  for (int64_t c = 0; c < int64_t(gold.chunk_start.size()) && first_bad < 0; ++c) {
    std::vector<double> a(bad.chunk_states.begin() + c * per, bad.chunk_states.begin() + (c + 1) * per);
    std::vector<double> e(gold.chunk_states.begin() + c * per, gold.chunk_states.begin() + (c + 1) * per);
    if (agreement_rel(a, e) > 1e-6) first_bad = c;
  }
  CHECK(first_bad == 1);
  CHECK(gold.chunk_start[1] == 16);
}

// -----------------------------------------------------------------------------------------------
// Chunk-state bounds (intermediate_bounds["chunk_states"])
// -----------------------------------------------------------------------------------------------

namespace {

std::vector<double> cut_row(const std::vector<double>& x, int64_t per_row, int64_t n) {
  if (x.empty()) return {};
  return std::vector<double>(x.begin() + n * per_row, x.begin() + (n + 1) * per_row);
}

// One sequence of a (B, T, ...) problem (batch row b, input-state row n) cut to its tokens
// [s0, s0 + len), as a B = 1, no-varlen problem with that sequence's input-state row.
template <class Params, class Inputs>
Inputs cut_inputs(const Params& p, const Inputs& in, int64_t R, int64_t S, int64_t b, int64_t n, int64_t s0,
                  int64_t len) {
  Inputs o = cut_tokens(in, p.B, p.T, b, b + 1, s0, len);
  const int64_t H = p.H, N = p.N, P = p.P;
  o.angle_state = cut_row(in.angle_state, H * S, n);
  o.ssm_state = cut_row(in.ssm_state, H * P * N, n);
  o.k_state = cut_row(in.k_state, R * H * N, n);
  o.v_state = cut_row(in.v_state, H * P, n);
  // An empty cut (a chunk at the sequence start) has no Z: MIMO_Z then goes too (they come together;
  // the output gate does not touch the state or its bound).
  if constexpr (requires { o.zeta; })
    if (o.z.empty()) o.zeta.clear();
  return o;
}

// (b) For every chunk c (sequence n, first token t0 of the sequence's chunk grid): the chunk's
// bound equals the final_ssm_bound of the sequence truncated before t0, folded like the value:
//   + (1 - lambda_{t0}) DT_{t0} sum_r |V_{t0-1} Psi_r| |K_{t0-1,r}|  (the truncated run's final V / K).
// The step form computes both with the same operations in the same order, so the relation is exact
// (bit for bit); it is checked to 1e-14 relative. Returns the worst relative difference.
// (a) Also: bound >= |chunk_states| elementwise (both forms), the chunked form's bound agrees.
template <class Params, class Inputs, class Step, class Chunked>
double check_chunk_bounds(const Params& p, const Inputs& in, int64_t R, int64_t S, const std::vector<double>& psi,
                          Step step, Chunked chunked) {
  const Result st = step(p, in), ch = chunked(p, in);
  REQUIRE(st.chunk_states_bound.size() == st.chunk_states.size());
  for (const Result* r : {&st, &ch})
    for (size_t i = 0; i < r->chunk_states.size(); ++i)
      CHECK(r->chunk_states_bound[i] >= std::fabs(r->chunk_states[i]) * (1 - 1e-14));
  CHECK(agreement_rel(ch.chunk_states_bound, st.chunk_states_bound) <= kFormAgreement);

  const int64_t H = p.H, P = p.P, N = p.N, T = p.T, Q = p.chunk_size;
  const int64_t per = H * P * N;
  double worst = 0;
  int64_t checked = 0;
  for (size_t c = 0; c < st.chunk_start.size(); ++c) {
    const int64_t n = st.chunk_seq[c];
    const int64_t b = p.cu_seqlens.empty() ? n : 0;
    const int64_t s0 = p.cu_seqlens.empty() ? 0 : p.cu_seqlens[n];
    const int64_t t0 = st.chunk_start[c] - s0;  // first token of the chunk within its sequence
    REQUIRE(t0 % Q == 0);
    Params q = p;
    q.B = 1;
    q.T = t0;
    q.cu_seqlens.clear();
    q.extra_chunk_sizes.clear();
    const Inputs cut = cut_inputs(p, in, R, S, b, n, s0, t0);
    const Result pre = step(q, cut);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = (b * H + h) * T + s0 + t0;
      const double lam = 1.0 / (1.0 + std::exp(-in.trap[i]));
      const double w = (1.0 - lam) * in.dt[i];
      std::vector<double> expect(P * N), got(P * N);
      for (int64_t pp = 0; pp < P; ++pp)
        for (int64_t j = 0; j < N; ++j) {
          double acca = 0;
          for (int64_t r = 0; r < R; ++r) {
            const double ps = psi.empty() ? 1.0 : psi[(h * R + r) * P + pp];
            acca += std::fabs(pre.final_v[h * P + pp] * ps) * std::fabs(pre.final_k[(r * H + h) * N + j]);
          }
          expect[pp * N + j] = pre.final_ssm_bound[h * P * N + pp * N + j] + w * acca;
          got[pp * N + j] = st.chunk_states_bound[c * per + h * P * N + pp * N + j];
        }
      const double a = agreement_rel(got, expect);
      INFO("chunk " << c << " (sequence " << n << ", t0 " << t0 << "), head " << h);
      CHECK(a <= 1e-14);
      worst = std::max(worst, a);
      ++checked;
    }
  }
  CHECK(checked == int64_t(st.chunk_start.size()) * H);
  return worst;
}

}  // namespace

TEST_CASE("Chunk-state bounds: >= |value|, and the truncated problem's final_ssm_bound, folded", "[cpu][L0]") {
  auto siso_step_fn = [](const SisoParams& p, const SisoInputs& in) { return siso_step(p, in); };
  auto siso_ch_fn = [](const SisoParams& p, const SisoInputs& in) { return siso_chunked(p, in); };
  auto mimo_step_fn = [](const MimoParams& p, const MimoInputs& in) { return mimo_step(p, in); };
  auto mimo_ch_fn = [](const MimoParams& p, const MimoInputs& in) { return mimo_chunked(p, in); };
  double worst = 0;
  SECTION("SISO") {
    const bool states = GENERATE(false, true);
    const bool varlen = GENERATE(false, true);
    SisoParams p{.H = 2, .G = 1, .N = 8, .P = 3, .S = 3, .chunk_size = 8};
    if (varlen) {
      p.B = 1;
      p.T = 45;
      p.cu_seqlens = {0, 5, 5, 23, 45};  // mid-chunk starts, an empty sequence, T % Q != 0
    } else {
      p.B = 2;
      p.T = 37;  // 4 full chunks and a 5-token tail
    }
    const Opts o{.states = states};
    const auto in = make_siso(p, 901 + 2 * states + varlen, o);
    worst = check_chunk_bounds(p, in, 1, p.S, {}, siso_step_fn, siso_ch_fn);
    // The oracle exposes the step form's bound under the intermediate's name, with its shape.
    const OracleResult orr = siso_oracle(p, in);
    const auto it = orr.intermediate_bounds.find("chunk_states");
    REQUIRE(it != orr.intermediate_bounds.end());
    CHECK(it->second == siso_step(p, in).chunk_states_bound);
    for (const auto& t : orr.intermediates)
      if (t.name == "chunk_states") {
        CHECK(t.dtype == DType::bf16);  // mamba3_siso_fwd allocates SSM_States in bf16
        CHECK(t.data.size() == it->second.size());
      }
  }
  SECTION("MIMO") {
    const bool states = GENERATE(false, true);
    const bool varlen = GENERATE(false, true);
    MimoParams p{.H = 2, .N = 8, .P = 3, .R = varlen ? 3 : 2, .rotary_dim_divisor = 2, .chunk_size = 4};
    if (varlen) {
      p.B = 1;
      p.T = 30;
      p.cu_seqlens = {0, 0, 7, 7, 30};  // a leading and a middle empty sequence, mid-chunk starts
    } else {
      p.B = 2;
      p.T = 19;
    }
    const MOpts o{.states = states};
    const auto in = make_mimo(p, 911 + 2 * states + varlen, o);
    worst = check_chunk_bounds(p, in, p.R, p.S(), in.psi, mimo_step_fn, mimo_ch_fn);
    const OracleResult orr = mimo_oracle(p, in);
    const auto it = orr.intermediate_bounds.find("chunk_states");
    REQUIRE(it != orr.intermediate_bounds.end());
    CHECK(it->second == mimo_step(p, in).chunk_states_bound);
    for (const auto& t : orr.intermediates)
      if (t.name == "chunk_states") CHECK(t.dtype == DType::f32);  // the TileLang fp32 running state
  }
  std::printf("chunk-state bound vs truncated final_ssm_bound (folded): worst rel diff %.3g\n", worst);
}

TEST_CASE("Chunk-state bounds equal the chunk states when every term is nonnegative", "[cpu][L0]") {
  MimoParams p{.T = 23, .H = 2, .N = 8, .P = 4, .R = 2, .chunk_size = 5};
  const MOpts o{.states = true};
  auto in = make_mimo(p, 5, o);
  for (auto* x : {&in.q, &in.k, &in.v, &in.psi, &in.q_bias, &in.k_bias, &in.ssm_state, &in.k_state, &in.v_state})
    for (auto& e : *x) e = std::fabs(e);
  in.angles.assign(in.angles.size(), 0.0);
  in.angle_state.assign(in.angle_state.size(), 0.0);
  for (const Result& r : {mimo_step(p, in), mimo_chunked(p, in)}) {
    CHECK(max_abs(r.chunk_states) > 0);
    CHECK(agreement_rel(r.chunk_states_bound, r.chunk_states) <= 1e-13);
  }
}
