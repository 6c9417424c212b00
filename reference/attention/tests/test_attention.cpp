// Attention oracle tests: form (a) vs form (b) agreement on feature-covering cases, conventions
// checked against hand-derived values, metamorphic identities (paged == dense, varlen == per-sequence
// dense, GQA == repeated-KV MHA, split combine == unsplit), gradcheck by central finite differences,
// the LSE-only loss (dV == 0) and magnitude sanity. The mutants and the kernel emulations' math:
// test_attention_calibration.cpp (the tolerance policy itself is proven by `assay calibrate --op
// attention`, which judges the mutants and emulations of fixtures/attention.cpp); the tile kernels
// and a hidden benchmark ("[.bench]"): test_attention_tiles.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "reference/attention/attention.h"
#include "reference/attention/tests/attention_test_util.h"

using namespace assay::attention;
using namespace attention_test;
using assay::agreement_rel;

TEST_CASE("forms (a) and (b) agree to 1e-12, forward and backward", "[cpu][L0]") {
  double worst_fwd = 0, worst_comb = 0, worst_bwd = 0;
  for (const auto& c : sweep_cases()) {
    auto [p, in] = realize(c, 11);
    const auto a = forward_definitional(p, in.q, in.k, in.v, in.sink);
    const auto b = forward_online(p, in.q, in.k, in.v, in.sink);
    const double eo = agreement_rel(b.o, a.o), el = agreement_rel(b.lse, a.lse);
    const bool split = p.num_splits > 1;  // one split: no copies (attention.h)
    REQUIRE(b.o_combined.empty() == !split);
    const double co = agreement_rel(split ? b.o_combined : b.o, a.o);
    const double cl = agreement_rel(split ? b.lse_combined : b.lse, a.lse);
    INFO(c.name << ": O " << eo << " LSE " << el << " combined O " << co << " LSE " << cl);
    CHECK(eo <= 1e-12);
    CHECK(el <= 1e-12);
    CHECK(co <= 1e-12);
    CHECK(cl <= 1e-12);
    // No NaN anywhere; every value finite except LSE = -inf rows.
    for (double x : a.o) REQUIRE(std::isfinite(x));
    for (double x : a.lse) REQUIRE((std::isfinite(x) || x == kNegInf));
    worst_fwd = worst(worst_fwd, worst(eo, el));
    worst_comb = worst(worst_comb, worst(co, cl));
    // Tile size independence of form (b): a different schedule gives the same answer.
    Params p2 = p;
    p2.tile_n = p.tile_n * 2 + 1, p2.tile_m = 7, p2.num_splits = 1;
    const auto b2 = forward_online(p2, in.q, in.k, in.v, in.sink);
    CHECK(agreement_rel(b2.o, a.o) <= 1e-12);
    if (!c.backward) continue;
    const auto [dout, dlse] = cotangents(a, 99);
    const auto ga = backward_definitional(p, in.q, in.k, in.v, in.sink, dout, dlse);
    const auto gb = backward_tiled(p, in.q, in.k, in.v, in.sink, b.o, b.lse, dout, dlse);
    worst_bwd = worst(worst_bwd, check_grads_agree(gb, ga, c.name));
  }
  std::printf("[attention] worst agreement_rel (a) vs (b): forward %.3e, split combine %.3e, "
              "backward %.3e\n", worst_fwd, worst_comb, worst_bwd);
}

TEST_CASE("conventions: bottom-right causal, inclusive windows, sink, LSE units",
          "[cpu][L0]") {
  // With q = 0 every visible score is 0, so P is uniform over the visible keys and
  // LSE = log(#visible) (natural log). V = one-hot of the key index makes O_i the P row.
  auto run = [](Params p, auto&& check) {
    p.Hq = p.Hkv = 1, p.D = 2, p.Dv = p.Sk;
    std::vector<double> q(p.Sq * p.D, 0.0), k(p.Sk * p.D, 0.5), v(p.Sk * p.Sk, 0.0), sink;
    for (int64_t j = 0; j < p.Sk; ++j) v[j * p.Sk + j] = 1;
    if (p.has_sink) sink = {std::log(2.0)};
    for (int form = 0; form < 2; ++form) {
      p.tile_n = 2, p.num_splits = 2;
      auto r = form == 0 ? forward_definitional(p, q, k, v, sink) : forward_online(p, q, k, v, sink);
      check(r);
    }
  };
  SECTION("causal sq=2, sk=5: row 0 sees keys 0-3, row 1 all 5 (README)") {
    Params p = dense(1, 2, 5, 1, 1, 2, 5);
    p.causal = true;
    run(p, [](const ForwardResult& r) {
      for (int j = 0; j < 5; ++j) CHECK(r.o[0 * 5 + j] == Approx(j <= 3 ? 0.25 : 0.0).margin(1e-15));
      for (int j = 0; j < 5; ++j) CHECK(r.o[1 * 5 + j] == Approx(0.2).margin(1e-15));
      CHECK(r.lse[0] == Approx(std::log(4.0)).epsilon(1e-14));
      CHECK(r.lse[1] == Approx(std::log(5.0)).epsilon(1e-14));
    });
  }
  SECTION("causal sq=5, sk=2: rows 0-2 fully masked (O = 0, LSE = -inf), row 3 sees key 0") {
    Params p = dense(1, 5, 2, 1, 1, 2, 2);
    p.causal = true;
    run(p, [](const ForwardResult& r) {
      for (int i = 0; i < 3; ++i) {
        CHECK(r.lse[i] == kNegInf);
        CHECK(r.o[i * 2] == 0.0);
        CHECK(r.o[i * 2 + 1] == 0.0);
      }
      CHECK(r.o[3 * 2 + 0] == 1.0);
      CHECK(r.o[3 * 2 + 1] == 0.0);
      CHECK(r.lse[3] == 0.0);  // log(1)
      CHECK(r.o[4 * 2 + 0] == Approx(0.5).margin(1e-15));
      CHECK(r.lse[4] == Approx(std::log(2.0)).epsilon(1e-14));
    });
  }
  SECTION("window (1, 1), sq = sk = 5: row 2 sees exactly keys 1, 2, 3 (inclusive bounds)") {
    Params p = dense(1, 5, 5, 1, 1, 2, 5);
    p.window_left = 1, p.window_right = 1;
    run(p, [](const ForwardResult& r) {
      for (int j = 0; j < 5; ++j) CHECK(r.o[2 * 5 + j] == Approx(j >= 1 && j <= 3 ? 1.0 / 3 : 0.0).margin(1e-15));
      CHECK(r.lse[0] == Approx(std::log(2.0)).epsilon(1e-14));  // keys 0, 1
      CHECK(r.lse[2] == Approx(std::log(3.0)).epsilon(1e-14));
    });
  }
  SECTION("window (2, 0) with sq=3 < sk=6: row i sees keys [i+1, i+3] (bottom-right)") {
    Params p = dense(1, 3, 6, 1, 1, 2, 6);
    p.window_left = 2, p.window_right = 0;
    run(p, [](const ForwardResult& r) {
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 6; ++j)
          CHECK(r.o[i * 6 + j] == Approx(j >= i + 1 && j <= i + 3 ? 1.0 / 3 : 0.0).margin(1e-15));
    });
  }
  SECTION("sink = log 2 adds 2 to the denominator; a fully masked row gets LSE = sink, O = 0") {
    Params p = dense(1, 4, 2, 1, 1, 2, 2);
    p.causal = true, p.has_sink = true;
    run(p, [](const ForwardResult& r) {
      // rows 0, 1: no key -> LSE = log 2, O = 0.  Row 2: one key (score 0): P = 1/(1+2).
      CHECK(r.lse[0] == Approx(std::log(2.0)).epsilon(1e-14));
      CHECK(r.o[0] == 0.0);
      CHECK(r.o[2 * 2 + 0] == Approx(1.0 / 3).epsilon(1e-14));
      CHECK(r.lse[2] == Approx(std::log(3.0)).epsilon(1e-14));
      CHECK(r.o[3 * 2 + 1] == Approx(0.25).epsilon(1e-14));  // two keys + 2: 1/4 each
      CHECK(r.lse[3] == Approx(std::log(4.0)).epsilon(1e-14));
    });
  }
  SECTION("softmax scale default 1/sqrt(D), softcap tanh") {
    // One query, two keys: scores x0 = scale*<q,k0>, x1 = 0.  q = (1, 1), k0 = (2, 0): x0 = 2/sqrt 2.
    for (double cap : {0.0, 0.5}) {
      Params p = dense(1, 1, 2, 1, 1, 2, 1);
      p.softcap = cap;
      std::vector<double> q{1, 1}, k{2, 0, 0, 0}, v{1, 0}, sink;
      const double x0 = 2 / std::sqrt(2.0);
      const double s0 = cap > 0 ? cap * std::tanh(x0 / cap) : x0;
      const double p0 = std::exp(s0) / (std::exp(s0) + 1);
      for (int form = 0; form < 2; ++form) {
        auto r = form == 0 ? forward_definitional(p, q, k, v, sink) : forward_online(p, q, k, v, sink);
        CHECK(r.o[0] == Approx(p0).epsilon(1e-14));
        CHECK(r.lse[0] == Approx(std::log(std::exp(s0) + 1)).epsilon(1e-14));
      }
    }
  }
}

TEST_CASE("GQA maps query head h to KV head h / (Hq/Hkv) (== repeated-KV MHA)", "[cpu][L0]") {
  Params g = dense(2, 9, 13, 6, 2, 8, 5);
  g.causal = true;
  auto in = make_inputs(g, 5);
  // MHA reference: KV head of query head h is h / 3, repeated contiguously ("(h g)").
  Params m = g;
  m.Hkv = 6;
  std::vector<double> km(2 * 13 * 6 * 8), vm(2 * 13 * 6 * 5);
  for (int64_t t = 0; t < 2 * 13; ++t)
    for (int64_t h = 0; h < 6; ++h) {
      for (int64_t d = 0; d < 8; ++d) km[(t * 6 + h) * 8 + d] = in.k[(t * 2 + h / 3) * 8 + d];
      for (int64_t d = 0; d < 5; ++d) vm[(t * 6 + h) * 5 + d] = in.v[(t * 2 + h / 3) * 5 + d];
    }
  const auto rg = forward_definitional(g, in.q, in.k, in.v, in.sink);
  const auto rm = forward_definitional(m, in.q, km, vm, in.sink);
  CHECK(rg.o == rm.o);
  CHECK(rg.lse == rm.lse);
  const auto rb = forward_online(g, in.q, in.k, in.v, in.sink);
  CHECK(agreement_rel(rb.o, rm.o) <= 1e-12);
}

TEST_CASE("paged KV == dense KV (page sizes 1, 3, 7, 16, shuffled tables)", "[cpu][L0]") {
  const int64_t ps = GENERATE(1, 3, 7, 16);
  Params pd = dense(3, 6, 23, 4, 2, 8, 6);
  pd.causal = true, pd.has_sink = true, pd.tile_n = 5;
  const std::vector<int32_t> lens{23, 0, 14};
  pd.seqused_k = lens;
  Inputs in = make_inputs(pd, 21);
  const auto ref = forward_definitional(pd, in.q, in.k, in.v, in.sink);
  Inputs pin = in;
  Params pp = to_paged(pd, ps, lens, pin, 1000 + ps);
  const auto ra = forward_definitional(pp, pin.q, pin.k, pin.v, pin.sink);
  const auto rb = forward_online(pp, pin.q, pin.k, pin.v, pin.sink);
  CHECK(ra.o == ref.o);  // same arithmetic, only the addressing differs: bit-identical
  CHECK(ra.lse == ref.lse);
  CHECK(agreement_rel(rb.o, ref.o) <= 1e-12);
  CHECK(agreement_rel(rb.lse, ref.lse) <= 1e-12);
  // Backward through pages: dK / dV land on the pages of the dense rows.
  Rng r(3);
  const auto dout = r.vec(ref.o.size());
  const auto gd = backward_definitional(pd, in.q, in.k, in.v, in.sink, dout, {});
  const auto gp = backward_tiled(pp, pin.q, pin.k, pin.v, pin.sink, rb.o, rb.lse, dout, {});
  double e = 0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t j = 0; j < lens[b]; ++j) {
      const int64_t row = int64_t(pp.block_table[b * pp.pages_per_seq + j / ps]) * ps + j % ps;
      for (int64_t x = 0; x < 2 * 8; ++x)
        e = std::max(e, std::fabs(gp.dk[row * 16 + x] - gd.dk[(b * 23 + j) * 16 + x]));
    }
  CHECK(e <= 1e-12);
  CHECK(agreement_rel(gp.dq, gd.dq) <= 1e-12);
}

TEST_CASE("block-table capacity: overflow raises, exactly at capacity does not", "[cpu][L0]") {
  Params p = dense(1, 2, 0, 1, 1, 4, 4);
  p.page_size = 4, p.num_pages = 4, p.pages_per_seq = 2, p.block_table = {3, 1};
  std::vector<double> q(2 * 4, 0.1), k(16 * 4, 0.2), v(16 * 4, 0.3), sink;
  p.seqused_k = {8};  // 2 pages of 4: exactly at capacity
  CHECK_NOTHROW(forward_definitional(p, q, k, v, sink));
  CHECK_NOTHROW(forward_online(p, q, k, v, sink));
  p.seqused_k = {9};  // needs a third page
  CHECK_THROWS_AS(forward_definitional(p, q, k, v, sink), assay::InputError);
  CHECK_THROWS_AS(forward_online(p, q, k, v, sink), assay::InputError);
  p.seqused_k = {8}, p.block_table = {3, 4};  // page id out of range
  CHECK_THROWS_AS(forward_definitional(p, q, k, v, sink), assay::InputError);
  Params g = dense(1, 2, 2, 3, 2, 4, 4);  // Hq not a multiple of Hkv
  CHECK_THROWS_AS(forward_definitional(g, q, k, v, sink), assay::InputError);
}

TEST_CASE("varlen == per-sequence dense (with empty sequences)", "[cpu][L0]") {
  Params p = dense(4, 0, 0, 2, 1, 8, 6);
  p.cu_seqlens_q = {0, 5, 5, 14, 15};
  p.cu_seqlens_k = {0, 7, 10, 10, 30};
  p.causal = true, p.window_left = 3, p.softcap = 2, p.tile_n = 4;
  auto in = make_inputs(p, 8);
  const auto rv = forward_definitional(p, in.q, in.k, in.v, in.sink);
  const auto rb = forward_online(p, in.q, in.k, in.v, in.sink);
  const int64_t total_q = 15;
  for (int64_t b = 0; b < 4; ++b) {
    const int64_t q0 = p.cu_seqlens_q[b], sq = p.cu_seqlens_q[b + 1] - q0;
    const int64_t k0 = p.cu_seqlens_k[b], sk = p.cu_seqlens_k[b + 1] - k0;
    Params d = p;
    d.cu_seqlens_q.clear(), d.cu_seqlens_k.clear();
    d.B = 1, d.Sq = sq, d.Sk = sk;
    std::vector<double> q(in.q.begin() + q0 * 2 * 8, in.q.begin() + (q0 + sq) * 2 * 8);
    std::vector<double> k(in.k.begin() + k0 * 8, in.k.begin() + (k0 + sk) * 8);
    std::vector<double> v(in.v.begin() + k0 * 6, in.v.begin() + (k0 + sk) * 6);
    const auto rd = forward_definitional(d, q, k, v, in.sink);
    for (int64_t x = 0; x < sq * 2 * 6; ++x) CHECK(rv.o[q0 * 2 * 6 + x] == rd.o[x]);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < sq; ++i) CHECK(rv.lse[h * total_q + q0 + i] == rd.lse[h * sq + i]);
    if (sk == 0)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < sq; ++i) CHECK(rv.lse[h * total_q + q0 + i] == kNegInf);
  }
  CHECK(agreement_rel(rb.o, rv.o) <= 1e-12);
  CHECK(agreement_rel(rb.lse, rv.lse) <= 1e-12);
}

TEST_CASE("split-KV: combine == unsplit, empty splits, all-empty rows", "[cpu][L0]") {
  Params p = dense(1, 20, 50, 2, 1, 8, 8);
  p.causal = true, p.tile_n = 8;  // 7 KV tiles
  auto in = make_inputs(p, 4);
  const auto u = forward_online(p, in.q, in.k, in.v, in.sink);
  for (int64_t ns : {1, 2, 3, 7, 8, 13}) {
    Params ps = p;
    ps.num_splits = ns;
    const auto r = forward_online(ps, in.q, in.k, in.v, in.sink);
    INFO("num_splits " << ns);
    if (ns == 1) {  // the single split is the unsplit pass: nothing split is emitted
      CHECK((r.o_partial.empty() && r.lse_partial.empty() && r.o_combined.empty() && r.lse_combined.empty()));
      CHECK(r.o == u.o);
      continue;
    }
    CHECK(agreement_rel(r.o_combined, u.o) <= 1e-12);
    CHECK(agreement_rel(r.lse_combined, u.lse) <= 1e-12);
    // Splits beyond ceil(7 / ceil(7 / ns)) hold no tile: LSE -inf, O 0.
    const int64_t per = (7 + ns - 1) / ns, used = (7 + per - 1) / per;
    const int64_t lsz = 2 * 20;
    for (int64_t s = used; s < ns; ++s)
      for (int64_t x = 0; x < lsz; ++x) CHECK(r.lse_partial[s * lsz + x] == kNegInf);
  }
  // Combine of rows whose partials are all -inf: O = 0, LSE = -inf (the short-circuit path).
  std::vector<double> op(3 * 20 * 2 * 8, 1.0), lp(3 * 2 * 20, kNegInf);
  const auto c = combine_splits(p, 3, op, lp);
  for (double x : c.o) CHECK(x == 0.0);
  for (double x : c.lse) CHECK(x == kNegInf);
}

TEST_CASE("backward matches central finite differences (gradcheck)", "[cpu][L0]") {
  struct G {
    std::string name;
    Params p;
  };
  std::vector<G> gs;
  gs.push_back({"plain_gqa_dv", dense(2, 4, 6, 4, 2, 3, 5)});
  {
    G g{"causal_window_softcap_sink", dense(1, 6, 5, 2, 1, 4, 3)};
    g.p.causal = true, g.p.window_left = 2, g.p.softcap = 1.5, g.p.has_sink = true;
    gs.push_back(g);
  }
  {
    G g{"varlen_empty", dense(3, 0, 0, 2, 2, 3, 2)};
    g.p.cu_seqlens_q = {0, 3, 3, 7};
    g.p.cu_seqlens_k = {0, 4, 6, 6};
    g.p.has_sink = true, g.p.window_right = 1;
    gs.push_back(g);
  }
  {
    G g{"paged_ps2", dense(2, 3, 0, 2, 1, 3, 3)};
    g.p.page_size = 2, g.p.num_pages = 5, g.p.pages_per_seq = 2, g.p.block_table = {4, 0, 2, 3};
    g.p.seqused_k = {4, 3};
    g.p.causal = true;
    gs.push_back(g);
  }
  double worst_rel = 0;
  for (const auto& g : gs) {
    const auto& p = g.p;
    auto in = make_inputs(p, 17);
    const auto f = forward_definitional(p, in.q, in.k, in.v, in.sink);
    const auto [dout, dlse] = cotangents(f, 23);
    const auto ga = backward_definitional(p, in.q, in.k, in.v, in.sink, dout, dlse);
    const auto gb = backward_tiled(p, in.q, in.k, in.v, in.sink, f.o, f.lse, dout, dlse);
    const double eq = grad_err(ga.dq, fd_grad(p, in, &Inputs::q, dout, dlse));
    const double ek = grad_err(ga.dk, fd_grad(p, in, &Inputs::k, dout, dlse));
    const double ev = grad_err(ga.dv, fd_grad(p, in, &Inputs::v, dout, dlse));
    const double es = p.has_sink ? grad_err(ga.dsink, fd_grad(p, in, &Inputs::sink, dout, dlse)) : 0.0;
    INFO(g.name << ": dQ " << eq << " dK " << ek << " dV " << ev << " dSink " << es);
    CHECK(eq <= 1e-8);
    CHECK(ek <= 1e-8);
    CHECK(ev <= 1e-8);
    CHECK(es <= 1e-8);
    CHECK(agreement_rel(gb.dq, ga.dq) <= 1e-12);
    CHECK(agreement_rel(gb.dk, ga.dk) <= 1e-12);
    CHECK(agreement_rel(gb.dv, ga.dv) <= 1e-12);
    CHECK(agreement_rel(gb.dsink, ga.dsink) <= 1e-12);
    worst_rel = std::max({worst_rel, eq, ek, ev, es});
  }
  std::printf("[attention] gradcheck worst |analytic - fd| / max|grad|: %.3e\n", worst_rel);
}

TEST_CASE("loss on LSE only gives dV exactly 0 (and dQ, dK from finite differences)",
          "[cpu][L0]") {
  Params p = dense(1, 5, 7, 2, 1, 4, 3);
  p.causal = true, p.has_sink = true;
  auto in = make_inputs(p, 31);
  const auto f = forward_definitional(p, in.q, in.k, in.v, in.sink);
  std::vector<double> dout(f.o.size(), 0.0);
  Rng r(5);
  const auto dlse = r.vec(f.lse.size());  // every row has a sink, so every LSE is finite
  const auto ga = backward_definitional(p, in.q, in.k, in.v, in.sink, dout, dlse);
  const auto gb = backward_tiled(p, in.q, in.k, in.v, in.sink, f.o, f.lse, dout, dlse);
  for (double x : ga.dv) CHECK(x == 0.0);
  for (double x : gb.dv) CHECK(x == 0.0);
  double nq = 0;
  for (double x : ga.dq) nq = std::max(nq, std::fabs(x));
  CHECK(nq > 1e-3);  // the check is not vacuous: dQ is not zero
  CHECK(grad_err(ga.dq, fd_grad(p, in, &Inputs::q, dout, dlse)) <= 1e-8);
  CHECK(grad_err(ga.dk, fd_grad(p, in, &Inputs::k, dout, dlse)) <= 1e-8);
  CHECK(grad_err(ga.dsink, fd_grad(p, in, &Inputs::sink, dout, dlse)) <= 1e-8);
  CHECK(agreement_rel(gb.dq, ga.dq) <= 1e-12);
}

TEST_CASE("error-bound magnitudes dominate the values they bound", "[cpu][L0]") {
  Params p = dense(2, 9, 21, 4, 2, 8, 6);
  p.causal = true, p.softcap = 3, p.has_sink = true;
  auto in = make_inputs(p, 41, 4.0);
  const auto f = forward_definitional(p, in.q, in.k, in.v, in.sink);
  for (size_t i = 0; i < f.o.size(); ++i) {
    CHECK(std::fabs(f.o[i]) <= f.o_mag[i] * (1 + 1e-14));  // |sum p v| <= sum p |v|
    CHECK(f.o_score_mag[i] >= 0);
  }
  for (size_t i = 0; i < f.lse.size(); ++i) CHECK(std::fabs(f.lse[i]) <= f.lse_mag[i] * (1 + 1e-14));
  // With V >= 0, sum_j p_ij |v_j| = O exactly (same summation order).
  auto vpos = in.v;
  for (auto& x : vpos) x = std::fabs(x);
  const auto fp = forward_definitional(p, in.q, in.k, vpos, in.sink);
  CHECK(fp.o_mag == fp.o);
  Rng r(2);
  const auto dout = r.vec(f.o.size());
  const auto dlse = r.vec(f.lse.size());
  const auto g = backward_definitional(p, in.q, in.k, in.v, in.sink, dout, dlse);
  auto dominated = [](const std::vector<double>& x, const std::vector<double>& m) {
    for (size_t i = 0; i < x.size(); ++i)
      if (std::fabs(x[i]) > m[i] * (1 + 1e-12)) return false;
    return true;
  };
  CHECK(dominated(g.dq, g.dq_mag));
  CHECK(dominated(g.dk, g.dk_mag));
  CHECK(dominated(g.dv, g.dv_mag));
  CHECK(dominated(g.dsink, g.dsink_mag));
}
