// Tests for the gated delta rule oracles (reference/gated_delta).
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "tests/common.h"
#include "reference/core/check.h"
#include "reference/core/dtype.h"
#include "reference/core/tensor.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/gated_delta/tests/gated_delta_test_inputs.h"

using namespace assay;
using namespace assay::gated_delta;

namespace {

using gated_delta_test::base;
using gated_delta_test::Gen;
using gated_delta_test::make_inputs;

double rms_ratio(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
  return std::sqrt(num) / (std::sqrt(den) + 1e-300);
}

bool all_finite(const std::vector<double>& x) {
  for (double v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

struct Agree {
  double o, fs, cs;
  double worst() const { return std::max(o, std::max(fs, cs)); }
};
Agree agree(const Params& p, const Inputs& in) {
  const Result a = recurrent(p, in), b = chunked(p, in);
  return {agreement_rel(b.o, a.o), agreement_rel(b.final_state, a.final_state),
          agreement_rel(b.chunk_states, a.chunk_states)};
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("hand-derived scalar case (K = V = 1)", "[cpu][L0]") {
  // S0 = 0.5, scale = 1, two tokens (q, k, v, g, beta):
  //   t0: (1, 1, 2, ln 0.5, 0.5):  S = 0.5*0.5 = 0.25; kv_mem = 0.25; delta = 0.5*(2 - 0.25) = 0.875;
  //       S = 0.25 + 0.875 = 1.125; o = 1.125.
  //   t1: (2, 0.5, -1, 0, 1):  S = 1.125; kv_mem = 0.5625; delta = -1.5625; S = 1.125 - 0.78125 = 0.34375;
  //       o = 2 * 0.34375 = 0.6875.
  // Missing-alpha mutant (kv_mem from the undecayed state):
  //   t0: kv_mem = 0.5; delta = 0.75; S = 0.25 + 0.75 = 1.0; o = 1.0.
  //   t1: kv_mem = 0.5; delta = -1.5; S = 1.0 - 0.75 = 0.25; o = 0.5.
  Params p = base(1, 2, 1, 1, 1, 1, GENERATE(1, 2, 64));
  p.scale = 1.0;
  Inputs in;
  in.q = {1, 2};
  in.k = {1, 0.5};
  in.v = {2, -1};
  in.g = {std::log(0.5), 0.0};
  in.beta = {0.5, 1.0};
  in.initial_state = {0.5};
  for (auto* f : {&recurrent, &chunked}) {
    p.mutant = Mutant::none;
    Result r = (*f)(p, in);
    CHECK(r.o[0] == Approx(1.125).epsilon(1e-14));
    CHECK(r.o[1] == Approx(0.6875).epsilon(1e-14));
    CHECK(r.final_state[0] == Approx(0.34375).epsilon(1e-14));
    p.mutant = Mutant::missing_alpha;
    r = (*f)(p, in);
    CHECK(r.o[0] == Approx(1.0).epsilon(1e-14));
    CHECK(r.o[1] == Approx(0.5).epsilon(1e-14));
    CHECK(r.final_state[0] == Approx(0.25).epsilon(1e-14));
  }
}

TEST_CASE("recurrent and chunked forms agree to 1e-12", "[cpu][L0]") {
  struct Cfg {
    const char* what;
    Params p;
    Gen gen;
  };
  std::vector<Cfg> cfgs;
  auto add = [&](const char* what, Params p, Gen gen = {}) { cfgs.push_back({what, p, gen}); };
  for (int64_t T : {1, 15, 63, 64, 65, 130}) {
    for (int64_t C : {int64_t{16}, int64_t{32}, int64_t{64}, T}) {
      Params p = base(2, T, 2, 4, 16, 24, C);  // GVA 2:1, K != V
      Gen unit;  // keys with ||k||^2 ~ 1.5: bounded dynamics
      unit.key_scale = std::sqrt(3.0 / 16.0) * 1.2;
      add("gva, moderate gates, unnormalised keys", p, unit);
      Params pl = p;
      pl.qk_l2norm = true;
      add("l2norm", pl);
      Params pz = pl;
      pz.gate = GateMode::none;  // plain delta rule, g == 0 (weak spot of chunked kernels)
      add("g == 0", pz);
      Gen strong;
      strong.gate_lo = 1.0, strong.gate_hi = 8.0;
      add("strong gates", pl, strong);
    }
  }
  {
    Params p = base(1, 100, 2, 2, 32, 32, 32);
    p.qk_l2norm = true;
    p.gate = GateMode::in_kernel;
    p.beta = BetaMode::sigmoid;
    add("in-kernel gate, sigmoid beta", p);
    p.beta = BetaMode::two_sigmoid;
    add("two_sigmoid beta (negative eigenvalues)", p);
    p.state_layout = StateLayout::vk;
    add("[V,K] state layout", p);
    p.cu_seqlens = {0, 10, 10, 75, 100};
    add("varlen with an empty sequence", p);
    p.chunk_size = 7;
    add("varlen, odd chunk", p);
    Params q = base(1, 77, 1, 1, 8, 8, 16);
    Gen raw;  // U(-1,1) keys, ||k||^2 ~ K/3 = 2.7, beta up to 1: the unbounded-key regime
    add("unnormalised U(-1,1) keys, K = 8", q, raw);
  }
  double worst = 0;
  const char* worst_what = "";
  for (const auto& c : cfgs) {
    const Inputs in = make_inputs(c.p, 1000 + c.p.T * 7 + c.p.chunk_size, c.gen);
    const Agree a = agree(c.p, in);
    INFO(c.what << " T=" << c.p.T << " C=" << c.p.chunk_size << " o " << a.o << " final " << a.fs << " chunk "
                << a.cs);
    CHECK(a.worst() <= 1e-12);
    if (a.worst() > worst) worst = a.worst(), worst_what = c.what;
  }
  std::printf("[gated_delta] forms agree over %zu configs: worst max_rel %.3e (%s)\n", cfgs.size(), worst, worst_what);
}

TEST_CASE("run() reports the forms' agreement and bounds", "[cpu][L0]") {
  Params p = base(2, 65, 2, 4, 16, 16, 32);
  p.qk_l2norm = true;
  const Inputs in = make_inputs(p, 7);
  const OracleResult r = run(p, in, DType::bf16, DType::bf16);
  REQUIRE(r.outputs.size() == 2);
  REQUIRE(r.agreement.size() == 3);
  for (const auto& a : r.agreement) CHECK(a.max_rel <= 1e-12);
  CHECK(r.outputs[0].expected.shape == Shape{2, 65, 4, 16});
  CHECK(r.outputs[1].expected.shape == Shape{2, 4, 16, 16});
  CHECK(r.intermediates[0].shape == Shape{2 * 3, 4, 16, 16});  // ceil(65/32) = 3 chunks per sequence
  // Bounds dominate the values: |sum| <= sum |.| term by term.
  for (const auto& o : r.outputs) {
    REQUIRE(o.bound);
    for (size_t i = 0; i < o.expected.data.size(); ++i)
      CHECK(std::fabs(o.expected.data[i]) <= (*o.bound)[i] * (1 + 1e-12) + 1e-300);
  }
}

TEST_CASE("final_state_bound holds the largest update term of the last chunk, not only the last token's",
          "[cpu][L0]") {
  // T = 10, chunk 4: the last chunk is tokens 8, 9. With the last token's beta = 0 its update term
  // vanishes, but token 8's term |k_8| |beta_8| |v_8| stays in the bound; token 7 (previous chunk)
  // does not enter it. No initial state and zero gates keep the check to those terms.
  Params p = base(1, 10, 1, 1, 2, 2, 4);
  p.gate = GateMode::none;
  Gen gen;
  gen.h0 = false;
  Inputs in = make_inputs(p, 5, gen);
  in.g.clear();
  in.beta[9] = 0.0;
  const Result r = recurrent(p, in);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      // Token 9 adds nothing (beta = 0), so the last step's |e^g S| is |S_final|.
      const double s_abs = std::fabs(r.final_state[i * 2 + j]);
      const double t8 = std::fabs(in.k[8 * 2 + i]) * std::fabs(in.beta[8]) * std::fabs(in.v[8 * 2 + j]);
      CHECK(r.final_state_bound[i * 2 + j] >= s_abs + t8 * (1 - 1e-12));
    }
  // Moving the last token into its own chunk (chunk 9 -> last chunk = {9}) drops token 8's term.
  Params p9 = p;
  p9.chunk_size = 9;
  const Result r9 = recurrent(p9, in);
  for (int64_t x = 0; x < 4; ++x) CHECK(r9.final_state_bound[x] == std::fabs(r9.final_state[x]));
}

TEST_CASE("a -inf gate is a clean reset in both forms", "[cpu][L0]") {
  const int64_t T = 100;
  const int64_t t_reset = GENERATE(0, 37, 64);  // mid-chunk and at a chunk start (C = 32, 64)
  Params p = base(1, T, 1, 2, 16, 16, GENERATE(32, 64));
  p.qk_l2norm = true;
  Inputs in = make_inputs(p, 11);
  for (int64_t hv = 0; hv < 2; ++hv) in.g[t_reset * 2 + hv] = -std::numeric_limits<double>::infinity();
  // Reference for the tail: the tokens from t_reset on, started from the zero state (the gate at the
  // reset token is then irrelevant; set it to 0).
  Params pt = p;
  pt.T = T - t_reset;
  Inputs tail;
  auto slice = [&](const std::vector<double>& x, int64_t per_tok) {
    return std::vector<double>(x.begin() + t_reset * per_tok, x.end());
  };
  tail.q = slice(in.q, 16), tail.k = slice(in.k, 16), tail.v = slice(in.v, 2 * 16);
  tail.g = slice(in.g, 2), tail.beta = slice(in.beta, 2);
  tail.g[0] = tail.g[1] = 0.0;
  for (auto* f : {&recurrent, &chunked}) {
    const Result r = (*f)(p, in);
    REQUIRE(all_finite(r.o));
    REQUIRE(all_finite(r.final_state));
    REQUIRE(all_finite(r.chunk_states));
    const Result rt = recurrent(pt, tail);
    CHECK(agreement_rel(std::vector<double>(r.o.begin() + t_reset * 32, r.o.end()), rt.o) <= 1e-12);
    CHECK(agreement_rel(r.final_state, rt.final_state) <= 1e-12);
  }
  const Agree a = agree(p, in);
  CHECK(a.worst() <= 1e-12);
}

TEST_CASE("the missing-alpha mutant is told apart from the truth", "[cpu][L0]") {
  // Two regimes: unbounded random keys (U(-1,1), K = 16: ||k||^2 ~ 5) and l2-normalised keys (the
  // production case). Long-ish sequence with moderate gates (g in [-0.3, 0]).
  struct Regime {
    const char* what;
    bool l2;
    double key_scale;
    int64_t T;
  };
  for (const Regime& R : {Regime{"unbounded U(-1,1) keys", false, 1.0, 40}, Regime{"l2-normalised keys", true, 1.0, 256}}) {
    Params p = base(1, R.T, 2, 4, 16, 16, 64);
    p.qk_l2norm = R.l2;
    Gen gen;
    gen.key_scale = R.key_scale;
    const Inputs in = make_inputs(p, 21, gen);
    const Result truth = recurrent(p, in);
    Params pm = p;
    pm.mutant = Mutant::missing_alpha;
    const Result mr = recurrent(pm, in), mc = chunked(pm, in);
    // The chunked derivation of the mutant (exclusive cumsum) matches its token-by-token definition.
    CHECK(agreement_rel(mc.o, mr.o) <= 1e-12);
    CHECK(agreement_rel(mc.final_state, mr.final_state) <= 1e-12);
    const double e_o = agreement_rel(mr.o, truth.o), e_s = agreement_rel(mr.final_state, truth.final_state);
    const double r_o = rms_ratio(mr.o, truth.o);
    std::printf("[gated_delta] missing-alpha mutant, %s (T=%lld): o max_rel %.3e rms_ratio %.3e; final_state "
                "max_rel %.3e\n",
                R.what, static_cast<long long>(R.T), e_o, r_o, e_s);
    CHECK(e_o > 1e-3);
    CHECK(e_s > 1e-3);
  }
  // How far the mutant lands from a correct bf16 kernel, under the real tolerance policy, is
  // assay calibrate's job (variants in fixtures/gated_delta.cpp, CTest calibrate.gated_delta).
}

TEST_CASE("chunked-form mutants fail, and are invisible exactly where they should be", "[cpu][L0]") {
  Params p = base(1, 100, 1, 2, 16, 16, 32);
  p.qk_l2norm = true;
  const Inputs in = make_inputs(p, 5);
  const Result truth = recurrent(p, in);
  Params pz = p;
  pz.gate = GateMode::none;
  Inputs inz = in;
  inz.g.clear();
  const Result truth_z = recurrent(pz, inz);
  for (Mutant m : {Mutant::w_without_decay, Mutant::kkt_without_decay, Mutant::i_minus_a, Mutant::u_with_decay,
                   Mutant::strict_output_mask, Mutant::missing_alpha}) {
    Params pm = p;
    pm.mutant = m;
    const Result r = chunked(pm, in);
    const double e = agreement_rel(r.o, truth.o);
    std::printf("[gated_delta] mutant %-18s o max_rel %.3e\n", std::string(name(m)).c_str(), e);
    CHECK(e > 1e-3);
    // With g == 0 the decay mutants coincide with the truth (so a g == 0 fixture cannot kill them),
    // while the structural ones still fail.
    pm.gate = GateMode::none;
    const double ez = agreement_rel(chunked(pm, inz).o, truth_z.o);
    const bool decay_only = m == Mutant::w_without_decay || m == Mutant::kkt_without_decay ||
                            m == Mutant::u_with_decay || m == Mutant::missing_alpha;
    if (decay_only)
      CHECK(ez <= 1e-12);
    else
      CHECK(ez > 1e-3);
  }
}

TEST_CASE("chunk states bisect to the first bad chunk", "[cpu][L0]") {
  Params p = base(1, 200, 1, 1, 16, 16, 32);
  p.qk_l2norm = true;
  Inputs in = make_inputs(p, 9);
  const Result truth = chunked(p, in);
  REQUIRE(truth.num_chunks == 7);
  // Corrupt one token in chunk 3 (tokens 96..127): the first chunk state that differs is chunk 4.
  Inputs bad = in;
  bad.v[100 * 16 + 3] += 0.25;
  const Result r = chunked(p, bad);
  const int64_t per = 16 * 16;
  int64_t first_bad = -1;
  for (int64_t c = 0; c < r.num_chunks && first_bad < 0; ++c) {
    std::vector<double> a(r.chunk_states.begin() + c * per, r.chunk_states.begin() + (c + 1) * per);
    std::vector<double> b(truth.chunk_states.begin() + c * per, truth.chunk_states.begin() + (c + 1) * per);
    if (agreement_rel(a, b) > 1e-12) first_bad = c;
  }
  CHECK(first_bad == 4);
  // Chunk state 0 is the initial state.
  CHECK(std::vector<double>(truth.chunk_states.begin(), truth.chunk_states.begin() + per) == in.initial_state);
}

TEST_CASE("varlen: own initial state per sequence, chunk grid restarts, empty sequence", "[cpu][L0]") {
  const std::vector<int64_t> cu = {0, 37, 37, 100, 165};
  Params p = base(1, 165, 2, 2, 16, 16, 32);
  p.qk_l2norm = true;
  p.cu_seqlens = cu;
  const Inputs in = make_inputs(p, 77);
  for (auto* f : {&recurrent, &chunked}) {
    const Result r = (*f)(p, in);
    CHECK(r.num_seqs == 4);
    CHECK(r.num_chunks == 2 + 0 + 2 + 3);  // per-sequence grids: ceil(37/32), 0, ceil(63/32), ceil(65/32)
    const int64_t KV = 256, HV = 2;
    for (int64_t n = 0; n < 4; ++n) {
      const int64_t t0 = cu[n], L = cu[n + 1] - cu[n];
      Params ps = p;
      ps.cu_seqlens.clear();
      ps.T = L;
      Inputs s;
      s.q.assign(in.q.begin() + t0 * 32, in.q.begin() + (t0 + L) * 32);
      s.k.assign(in.k.begin() + t0 * 32, in.k.begin() + (t0 + L) * 32);
      s.v.assign(in.v.begin() + t0 * 32, in.v.begin() + (t0 + L) * 32);
      s.g.assign(in.g.begin() + t0 * 2, in.g.begin() + (t0 + L) * 2);
      s.beta.assign(in.beta.begin() + t0 * 2, in.beta.begin() + (t0 + L) * 2);
      s.initial_state.assign(in.initial_state.begin() + n * HV * KV, in.initial_state.begin() + (n + 1) * HV * KV);
      const Result rs = (*f)(ps, s);
      CHECK(agreement_rel(std::vector<double>(r.o.begin() + t0 * 32, r.o.begin() + (t0 + L) * 32), rs.o) == 0);
      CHECK(std::vector<double>(r.final_state.begin() + n * HV * KV, r.final_state.begin() + (n + 1) * HV * KV) ==
            rs.final_state);
      CHECK(std::vector<double>(r.chunk_states.begin() + r.chunk_offsets[n] * HV * KV,
                                r.chunk_states.begin() + r.chunk_offsets[n + 1] * HV * KV) == rs.chunk_states);
      if (L == 0) CHECK(rs.final_state == s.initial_state);
    }
  }
  // cu_seqlens ignored (state leaking across the packed sequences) is a different answer.
  Params leak = p;
  leak.cu_seqlens.clear();
  Inputs inl = in;
  inl.initial_state.resize(2 * 256);
  CHECK(agreement_rel(recurrent(leak, inl).o, recurrent(p, in).o) > 1e-3);
}

TEST_CASE("GVA: value head hv reads q/k head hv / (HV/H)", "[cpu][L0]") {
  Params p = base(1, 50, 2, 4, 8, 8, 16);
  p.qk_l2norm = true;
  const Inputs in = make_inputs(p, 3);
  auto expand = [&](bool modulo) {
    Params pe = p;
    pe.H = 4;
    Inputs e = in;
    e.q.assign(50 * 4 * 8, 0);
    e.k.assign(50 * 4 * 8, 0);
    for (int64_t t = 0; t < 50; ++t)
      for (int64_t hv = 0; hv < 4; ++hv) {
        const int64_t h = modulo ? hv % 2 : hv / 2;
        for (int64_t x = 0; x < 8; ++x) {
          e.q[(t * 4 + hv) * 8 + x] = in.q[(t * 2 + h) * 8 + x];
          e.k[(t * 4 + hv) * 8 + x] = in.k[(t * 2 + h) * 8 + x];
        }
      }
    return chunked(pe, e).o;
  };
  const auto o = chunked(p, in).o;
  CHECK(agreement_rel(expand(false), o) == 0);
  CHECK(agreement_rel(expand(true), o) > 1e-3);  // the h % H mapping is a different answer
}

TEST_CASE("state layouts [K,V] and [V,K]", "[cpu][L0]") {
  Params p = base(2, 40, 1, 2, 8, 12, 16);
  p.qk_l2norm = true;
  const Inputs in = make_inputs(p, 4);
  Params pv = p;
  pv.state_layout = StateLayout::vk;
  Inputs iv = in;
  auto transpose = [](const std::vector<double>& x, int64_t rows, int64_t cols) {
    std::vector<double> y(x.size());
    const int64_t n = static_cast<int64_t>(x.size()) / (rows * cols);
    for (int64_t m = 0; m < n; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) y[m * rows * cols + j * rows + i] = x[m * rows * cols + i * cols + j];
    return y;
  };
  iv.initial_state = transpose(in.initial_state, 8, 12);
  for (auto* f : {&recurrent, &chunked}) {
    const Result a = (*f)(p, in), b = (*f)(pv, iv);
    CHECK(a.o == b.o);
    CHECK(transpose(a.final_state, 8, 12) == b.final_state);
    CHECK(transpose(a.chunk_states, 8, 12) == b.chunk_states);
  }
}

TEST_CASE("preprocessing: l2norm eps, gate in kernel, beta, scale, plain delta rule", "[cpu][L0]") {
  // l2norm: eps inside the sqrt. (3, 4): 1/sqrt(25 + 1e-6); zero vector: 1/sqrt(1e-6) = 1000 (times 0).
  const double x34[2] = {3, 4}, x00[2] = {0, 0};
  CHECK(l2norm_scale(x34, 2, 1e-6) == Approx(1.0 / std::sqrt(25.000001)).epsilon(1e-15));
  CHECK(l2norm_scale(x00, 2, 1e-6) == Approx(1000.0).epsilon(1e-12));
  // softplus(0) = ln 2; above the threshold 20 it is the identity; far below, ~ e^x.
  CHECK(softplus(0.0) == Approx(std::log(2.0)).epsilon(1e-15));
  CHECK(softplus(30.0) == 30.0);
  CHECK(softplus(-30.0) == Approx(std::exp(-30.0)).epsilon(1e-12));
  // gate: -exp(A_log) softplus(a + dt_bias): A_log = ln 3, a = 0.5, dt_bias = -0.5 -> -3 ln 2.
  CHECK(gate_in_kernel(0.5, std::log(3.0), -0.5) == Approx(-3.0 * std::log(2.0)).epsilon(1e-14));
  CHECK(beta_value(BetaMode::sigmoid, 0.0) == 0.5);
  CHECK(beta_value(BetaMode::two_sigmoid, 0.0) == 1.0);
  CHECK(beta_value(BetaMode::given, 0.7) == 0.7);

  Params p = base(1, 33, 1, 2, 8, 8, 16);
  const Inputs in = make_inputs(p, 8);
  // qk_l2norm == feeding pre-normalised q/k.
  {
    Params pl = p;
    pl.qk_l2norm = true;
    Inputs pre = in;
    for (auto* x : {&pre.q, &pre.k})
      for (size_t r = 0; r < x->size() / 8; ++r) {
        double ss = 0;
        for (int i = 0; i < 8; ++i) ss += (*x)[r * 8 + i] * (*x)[r * 8 + i];
        for (int i = 0; i < 8; ++i) (*x)[r * 8 + i] /= std::sqrt(ss + 1e-6);
      }
    CHECK(agreement_rel(chunked(pl, in).o, chunked(p, pre).o) <= 1e-13);  // x*(1/sqrt) vs x/sqrt: ulps
  }
  // Default scale is K^-1/2; o is linear in scale.
  {
    Params ps = p;
    ps.scale = 1.0 / std::sqrt(8.0);
    CHECK(recurrent(p, in).o == recurrent(ps, in).o);
    ps.scale = 2.0;
    const auto o2 = recurrent(ps, in).o;
    ps.scale = 1.0;
    const auto o1 = recurrent(ps, in).o;
    for (size_t i = 0; i < o1.size(); ++i) CHECK(o2[i] == 2.0 * o1[i]);
  }
  // Plain delta rule == log gates identically 0.
  {
    Params pn = p;
    pn.gate = GateMode::none;
    Inputs inn = in, in0 = in;
    inn.g.clear();
    for (auto& g : in0.g) g = 0.0;
    CHECK(chunked(pn, inn).o == chunked(p, in0).o);
    CHECK(recurrent(pn, inn).o == recurrent(p, in0).o);
  }
  // In-kernel gate and sigmoid beta == precomputed log gate and beta.
  {
    Params pk = p;
    pk.gate = GateMode::in_kernel;
    pk.beta = BetaMode::two_sigmoid;
    const Inputs ik = make_inputs(pk, 12);
    Inputs pre = ik;
    pre.A_log.clear(), pre.dt_bias.clear();
    for (size_t i = 0; i < pre.g.size(); ++i) {
      pre.g[i] = gate_in_kernel(ik.g[i], ik.A_log[i % 2], ik.dt_bias[i % 2]);
      pre.beta[i] = 2.0 / (1.0 + std::exp(-ik.beta[i]));
    }
    CHECK(chunked(pk, ik).o == chunked(p, pre).o);
  }
}

TEST_CASE("degenerate shapes and input checks", "[cpu][L0]") {
  // T = 0: no output, no chunk, the final state is the initial state.
  Params p = base(2, 0, 1, 2, 4, 4, 16);
  const Inputs in = make_inputs(p, 1);
  for (auto* f : {&recurrent, &chunked}) {
    const Result r = (*f)(p, in);
    CHECK(r.o.empty());
    CHECK(r.num_chunks == 0);
    CHECK(r.final_state == in.initial_state);
  }
  // No initial state == zeros.
  Params q = base(2, 9, 1, 2, 4, 4, 4);
  Inputs a = make_inputs(q, 2), b = a;
  a.initial_state.clear();
  b.initial_state.assign(b.initial_state.size(), 0.0);
  CHECK(chunked(q, a).o == chunked(q, b).o);
  CHECK(recurrent(q, a).final_state == recurrent(q, b).final_state);
  // Bad inputs are InputError, not garbage.
  Inputs bad = a;
  bad.g[3] = std::nan("");
  CHECK_THROWS_AS(chunked(q, bad), assay::InputError);
  bad = a;
  bad.g[3] = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(recurrent(q, bad), assay::InputError);
  Params pv = q;
  pv.cu_seqlens = {0, 9};  // needs B == 1
  CHECK_THROWS_AS(chunked(pv, a), assay::InputError);
  Params ph = q;
  ph.H = 2, ph.HV = 3;
  CHECK_THROWS_AS(recurrent(ph, a), assay::InputError);
  Params pe = q;
  pe.emulate_h_dtype = DType::bf16;
  CHECK_THROWS_AS(run(pe, a), assay::InputError);
  Params pi = q;
  pi.emulate_intermediate_dtype = DType::bf16;
  CHECK_THROWS_AS(run(pi, a), assay::InputError);
  // fp32 emulation knobs change the chunked form only at fp32 rounding level.
  Params pf = q;
  pf.emulate_h_dtype = DType::f32, pf.emulate_intermediate_dtype = DType::f32;
  const double ef = agreement_rel(chunked(pf, a).o, chunked(q, a).o);
  CHECK(ef > 0.0);
  CHECK(ef < 1e-5);
}

// Hidden: run with  test_gated_delta "[bench]"
TEST_CASE("benchmark: chunked oracle, B=1 T=8192 H=8 K=V=128 chunk 64", "[.][bench]") {
  Params p = base(1, 8192, 8, 8, 128, 128, 64);
  p.qk_l2norm = true;
  const Inputs in = make_inputs(p, 1);
  // Wall time, and process CPU time (all threads; meaningful on a loaded shared machine).
  const std::clock_t c0 = std::clock();
  auto t0 = std::chrono::steady_clock::now();
  const Result c = chunked(p, in);
  auto t1 = std::chrono::steady_clock::now();
  const std::clock_t c1 = std::clock();
  const Result r = recurrent(p, in);
  auto t2 = std::chrono::steady_clock::now();
  const std::clock_t c2 = std::clock();
  const double cpu_c = double(c1 - c0) / CLOCKS_PER_SEC, cpu_r = double(c2 - c1) / CLOCKS_PER_SEC;
  const double sc = std::chrono::duration<double>(t1 - t0).count(), sr = std::chrono::duration<double>(t2 - t1).count();
  // FLOPs of the chunked form per (chunk, head), L = 64: KK^T 2L^2K, solve ~L^3/3, u 2L^2V, w 2L^2K,
  // wS 2LKV, QS 2LKV, QK^T 2L^2K, M vn 2L^2V, K^T dV 2LKV.
  const double L = 64, K = 128, V = 128;
  const double flop = (8192 / L) * 8 * (2 * L * L * K * 3 + L * L * L / 3 + 2 * L * L * V * 2 + 2 * L * K * V * 3);
  std::printf("[gated_delta] bench chunked: wall %.3f s (%.0f tokens/s, %.2f GFLOP/s fp64), cpu %.3f s (%.0f tokens/s "
              "per core-second); recurrent: wall %.3f s (%.0f tokens/s), cpu %.3f s; agreement o %.3e\n",
              sc, 8192 / sc, flop / sc * 1e-9, cpu_c, 8192 / cpu_c, sr, 8192 / sr, cpu_r, agreement_rel(c.o, r.o));
  CHECK(agreement_rel(c.o, r.o) <= 1e-12);
}
