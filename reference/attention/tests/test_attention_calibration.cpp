// Attention calibration material tested on the CPU: the oracle's mutants differ from the truth on
// the cases aimed at them, and the kernel emulations (attention_emulation.h) equal the oracle
// without rounding and differ with it. Tensors as reference/attention/attention.h (fp64).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "reference/attention/attention.h"
#include "reference/attention/attention_emulation.h"
#include "reference/attention/tests/attention_test_util.h"

using namespace assay::attention;
using namespace attention_test;
using assay::agreement_rel;

TEST_CASE("CPU mutants are rejected by the cases aimed at them", "[cpu][L0]") {
  // Each mutant of form (b) must differ from form (a) by far more than any sane tolerance on the
  // case built to expose it (and the correct form (b) must agree there).
  struct M {
    Mutant m;
    Case c;
    bool compare_combined;
  };
  auto mk = [](std::string name, Params p, double qscale = 1.0) { return Case{name, p, qscale, false}; };
  std::vector<M> ms;
  Params multi = dense(1, 40, 200, 4, 2, 16, 16);
  multi.tile_n = 64;
  ms.push_back({Mutant::first_kv_tile_only, mk("multi_tile", multi), false});
  ms.push_back({Mutant::no_o_rescale, mk("multi_tile_scores_grow", multi, 3.0), false});
  // fp64 exp overflows past 709; a kernel's fp32 exp past 88 (fixtures need scores > 88 only).
  ms.push_back({Mutant::no_max_subtraction, mk("huge_scores", multi, 3000.0), false});
  ms.push_back({Mutant::gqa_modulo, mk("gqa", multi), false});
  Params causal_rect = dense(1, 10, 40, 2, 2, 8, 8);
  causal_rect.causal = true, causal_rect.tile_n = 16;
  ms.push_back({Mutant::causal_top_left, mk("causal_sq_lt_sk", causal_rect), false});
  ms.push_back({Mutant::window_exclusive, mk("causal_window", causal_rect), false});
  Params sinkp = multi;
  sinkp.has_sink = true;
  ms.push_back({Mutant::no_sink, mk("sink", sinkp), false});
  Params tail = dense(1, 8, 70, 2, 2, 8, 8);  // 70 = 64 + 6: a partial last tile
  tail.tile_n = 64;
  ms.push_back({Mutant::tail_unmasked, mk("tail", tail), false});
  Params split = multi;
  split.num_splits = 3;
  ms.push_back({Mutant::combine_unweighted, mk("split", split), true});
  for (const auto& mm : ms) {
    auto [p, in] = realize(mm.c, 77);
    const auto a = forward_definitional(p, in.q, in.k, in.v, in.sink);
    const auto good = forward_online(p, in.q, in.k, in.v, in.sink);
    Params pm = p;
    pm.mutant = mm.m;
    const auto bad = forward_online(pm, in.q, in.k, in.v, in.sink);
    const auto& bo = mm.compare_combined ? bad.o_combined : bad.o;
    const double e_good = agreement_rel(mm.compare_combined ? good.o_combined : good.o, a.o);
    const double e_bad = agreement_rel(bo, a.o);
    INFO(mm.c.name << " mutant " << static_cast<int>(mm.m) << ": good " << e_good << " bad " << e_bad);
    std::printf("[attention] mutant %d on case %s: agreement_rel %.3e (correct form: %.3e)\n",
                static_cast<int>(mm.m), mm.c.name.c_str(), e_bad, e_good);
    CHECK(e_good <= 1e-12);
    CHECK(!(e_bad <= 1e-2));  // NaN / inf count as rejected
  }
}

// Kernel emulations (attention_emulation.h; calibrate judges them against the policy): with every
// rounding switched off (acc = p = o = f64) they must be the oracle's math, on every sweep case
// (varlen, paged, windows, softcap, sink, GQA); with bf16 / fp16 / e4m3 P they must differ from it.
TEST_CASE("kernel emulations without rounding equal the oracle, with rounding they do not", "[cpu][L0]") {
  using assay::DType;
  const KernelRounding exact{DType::f64, DType::f64, 1.0, DType::f64};
  const KernelRounding exact_scaled{DType::f64, DType::f64, 256.0, DType::f64};
  double worst_fwd = 0, worst_bwd = 0;
  for (const auto& c : sweep_cases()) {
    auto [p, in] = realize(c, 13);
    const auto a = forward_definitional(p, in.q, in.k, in.v, in.sink);
    for (const auto& kr : {exact, exact_scaled}) {
      const auto e = forward_emulated(p, in.q, in.k, in.v, in.sink, kr);
      const double eo = agreement_rel(e.o, a.o), el = agreement_rel(e.lse, a.lse);
      INFO(c.name << " p_scale " << kr.p_scale << ": O " << eo << " LSE " << el);
      CHECK(eo <= 1e-12);
      CHECK(el <= 1e-12);
      worst_fwd = worst(worst_fwd, worst(eo, el));
    }
    if (!c.backward) continue;
    const auto [dout, dlse] = cotangents(a, 7);
    const auto ga = backward_definitional(p, in.q, in.k, in.v, in.sink, dout, dlse);
    const auto ge = backward_emulated(p, in.q, in.k, in.v, in.sink, a.o, a.lse, dout, dlse, exact);
    worst_bwd = worst(worst_bwd, check_grads_agree(ge, ga, c.name));
  }
  std::printf("[attention] emulations without rounding vs form (a): forward %.3e, backward %.3e\n", worst_fwd, worst_bwd);
  // With rounding the emulations are low-precision kernels (the checks are not vacuous): relative
  // differences of the order of each P format's unit roundoff, ordered e4m3 > bf16 > fp16.
  Params p = dense(1, 40, 200, 4, 2, 64, 64);
  p.causal = true, p.has_sink = true, p.tile_n = 64;
  auto in = make_inputs(p, 123, 2.0);
  for (auto* x : {&in.q, &in.k, &in.v})
    for (auto& e : *x) e = assay::round_to(DType::e4m3, e);  // representable in every format below
  const auto a = forward_definitional(p, in.q, in.k, in.v, in.sink);
  auto diff = [&](DType pd, double ps) {
    const auto e = forward_emulated(p, in.q, in.k, in.v, in.sink, {DType::f32, pd, ps, DType::f64});
    return agreement_rel(e.o, a.o);
  };
  const double d8 = diff(DType::e4m3, 256.0), d16 = diff(DType::bf16, 1.0), dh = diff(DType::f16, 1.0);
  std::printf("[attention] emulated P rounding, agreement_rel of O: e4m3 %.3e, bf16 %.3e, fp16 %.3e\n", d8, d16, dh);
  CHECK(d8 > d16);
  CHECK(d16 > dh);
  CHECK(dh > 1e-6);  // far above fp32 noise
}

// Benchmark (hidden: run with `test_attention "[.bench]"`). Issue 3 acceptance: form (b) throughput
// on B=1, Hq=Hkv=8, Sq=Sk=4096, D=Dv=128, non-causal, fp64, in GFLOP/s counting 4*B*Hq*Sq*Sk*D,
// next to the Eigen fp64 GEMM rate measured in the same run (both use all OpenMP threads).
// Target: >= 50 % of the GEMM rate. Sizes can be shrunk with ASSAY_ATTN_BENCH_S=<Sq=Sk>.
