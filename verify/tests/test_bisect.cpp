// `assay bisect GOLDEN CANDIDATE` over the outputs (verify/bisect/bisect.h): a candidate that goes wrong
// from a position chosen by the test on is bisected to exactly that position and its chunk.
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "catch_compat.h"
#include "tests/common.h"
#include "fixtures/gen/case.h"
#include "fixtures/gen/inputs.h"
#include "fixtures/gen/op.h"
#include "verify/bisect/bisect.h"
#include "verify/io/stale.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {

// The golden's outputs rounded to their dtypes, as float32; from sequence position `from` on,
// every element of the output `name` is off by `rel` relative (and by `rel` * max|out| absolute,
// so that small elements are off too).
void write_planted(const fs::path& path, const Golden& g, const std::map<std::string, int64_t>& from_of, double rel) {
  auto h = h5::File::create(path.string());
  h.create_group("/outputs");
  for (const auto& o : g.outputs) {
    const auto& e = o.expected;
    int64_t t_axis = -1;
    for (size_t d = 0; d < e.axes.size(); ++d)
      if (e.axes[d] == "T") t_axis = static_cast<int64_t>(d);
    double scale = 0;
    for (double x : e.data) scale = std::max(scale, std::fabs(x));
    std::vector<float> v(e.data.size());
    for (size_t i = 0; i < v.size(); ++i) {
      double x = round_to(e.dtype, e.data[i]);
      const auto f = from_of.find(e.name);
      if (f != from_of.end() && t_axis >= 0 && e.unravel(static_cast<int64_t>(i))[static_cast<size_t>(t_axis)] >= f->second)
        x = x * (1 + rel) + rel * scale;
      v[i] = static_cast<float>(x);
    }
    h.write("/outputs/" + e.name, h5::Elem::f32, e.shape, v.data());
  }
}

BisectReport bisect_file(const Golden& g, const fs::path& cand) {
  const auto policy = TolerancePolicy::for_ops(std::string(ASSAY_SOURCE_DIR) + "/fixtures", {g.prov.op});
  return bisect_candidate(g, policy, h5::File::open_read(cand.string()), CandidateJudging{});
}

}  // namespace

TEST_CASE("bisect over the outputs finds the first bad position and chunk a test planted (ssd, mamba3, gated_delta)", "[cpu][L0]") {
  struct Case {
    std::string golden, output;
  };
  const std::vector<Case> cases{{"ssd/t1000_q64.h5", "out"}, {"mamba3/siso_T1000_q64.h5", "out"},
                                {"gated_delta/t300_c64_gva_l2.h5", "o"}};
  assay_test::SplitMix64 rng{20261125};
  const auto d = assay_test::fresh_dir("assay_test_bisect", "outputs");
  for (const auto& c : cases) {
    const auto g = read_golden((fs::path(ASSAY_SOURCE_DIR) / "golden" / c.golden).string());
    const int64_t Q = g.case_fields.get_int("chunk_size"), T = g.case_fields.get_int("T");
    REQUIRE(T / Q >= 3);
    // The exact candidate passes: nothing to bisect.
    write_planted(d / "exact.h5", g, {{c.output, T}}, 0.0);
    const auto ok = bisect_file(g, d / "exact.h5");
    INFO(c.golden << "\n" << ok.text());
    REQUIRE_FALSE(ok.any_bad());
    // Wrong from chunk k on (k drawn by the test, never 0, so the earlier chunks are checked too).
    for (int rep = 0; rep < 2; ++rep) {
      const int64_t k = 1 + static_cast<int64_t>(rng.u01() * static_cast<double>(T / Q - 1));
      const int64_t from = k * Q + static_cast<int64_t>(rng.u01() * static_cast<double>(Q));
      write_planted(d / "bad.h5", g, {{c.output, from}}, 0.05);
      const auto r = bisect_file(g, d / "bad.h5");
      INFO(c.golden << " planted from t=" << from << " (chunk " << k << ")\n" << r.text());
      REQUIRE(r.any_bad());
      REQUIRE(r.outputs.front().name == c.output);
      CHECK(r.outputs.front().first_bad_pos == from);
      CHECK(r.outputs.front().chunk == k);
      CHECK(r.outputs.front().before_ratio <= 1.0);
      CHECK(r.outputs.front().first_bad_ratio > 1.0);
      CHECK_THAT(r.text(), assay_test::Contains(fmt::format("at T={} of {}", from, T)));
      CHECK_THAT(r.text(), assay_test::Contains(fmt::format("= chunk {} x {}", k, Q)));
    }
  }
}

TEST_CASE("bisect lists the forward outputs before the backward ones (gradients: d + an input name)", "[cpu][L0]") {
  const auto g = read_golden((fs::path(ASSAY_SOURCE_DIR) / "golden/ssd/bwd_t130_q64_init.h5").string());
  REQUIRE(g.output("out"));
  REQUIRE(g.output("dx"));
  const auto d = assay_test::fresh_dir("assay_test_bisect", "fwd_bwd");
  // The gradient goes wrong earlier in the sequence than the forward output: still listed second.
  write_planted(d / "bad.h5", g, {{"out", 100}, {"dx", 10}}, 0.05);
  const auto r = bisect_file(g, d / "bad.h5");
  INFO(r.text());
  REQUIRE(r.outputs.size() >= 2);
  CHECK(r.outputs[0].name == "out");
  CHECK_FALSE(r.outputs[0].backward);
  CHECK(r.outputs[0].first_bad_pos == 100);
  CHECK(r.outputs[1].name == "dx");
  CHECK(r.outputs[1].backward);
  CHECK(r.outputs[1].first_bad_pos == 10);
  CHECK_THAT(r.text(), assay_test::Contains("also first bad: dx (backward) at T=10"));
}

// ---- the intermediates walk: a real mutant first wrong at a chunk / step the test chooses ----------

namespace {

// The candidate: every output and the walked intermediate from `vals` (the planted mutant's fp64
// values, rounded to the golden's dtypes as a kernel would store them), written as float64.
void write_mutant(const fs::path& path, const Golden& g, const std::map<std::string, std::vector<double>>& vals,
                  const std::string& walked) {
  auto h = h5::File::create(path.string());
  h.create_group("/outputs");
  h.create_group("/intermediates");
  auto put = [&](const std::string& ds, const Tensor& e, const std::vector<double>& v) {
    REQUIRE(v.size() == e.data.size());
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = round_to(e.dtype, v[i]);
    h.write(ds, h5::Elem::f64, e.shape, r.data());
  };
  for (const auto& o : g.outputs) {
    const auto it = vals.find(o.expected.name);
    put("/outputs/" + o.expected.name, o.expected, it != vals.end() ? it->second : o.expected.data);
  }
  const Tensor* t = g.intermediate(walked);
  REQUIRE(t);
  put("/intermediates/" + walked, *t, vals.at(walked));
}

}  // namespace

TEST_CASE("bisect walks the intermediates to exactly the chunk or step where a planted mutant first goes wrong "
          "(ssd, mamba3, gated_delta, adamw), and its repro bundle re-runs under compare",
          "[cpu][L0]") {
  struct Case {
    std::string op, golden, walked, label;
  };
  const std::vector<Case> cases{{"ssd", "t1000_q64", "chunk_states", "chunk"},
                                {"mamba3", "siso_T1000_q64", "chunk_states", "chunk"},
                                {"gated_delta", "t300_c64_gva_l2", "chunk_states", "chunk"},
                                {"optim", "adamw_foreach_10steps", "p_traj_emulated", "step"}};
  assay_test::SplitMix64 rng{20261126};
  const auto d = assay_test::fresh_dir("assay_test_bisect", "intermediates");
  for (const auto& c : cases) {
    const auto g = read_golden((fs::path(ASSAY_SOURCE_DIR) / "golden" / c.op / (c.golden + ".h5")).string());
    const auto fx = gen::load_fixture((fs::path(ASSAY_SOURCE_DIR) / "fixtures" / (c.op + ".toml")).string());
    const gen::Case* fc = fx.find(c.golden);
    REQUIRE(fc);
    const gen::OpDef* op = gen::find_op(c.op);
    REQUIRE((op && op->plant));
    gen::Inputs in(*fc);
    op->make_inputs(*fc, in);
    const Tensor* walked = g.intermediate(c.walked);
    REQUIRE(walked);
    const int64_t n = walked->shape[c.op == "ssd" ? 1 : 0];  // ssd: [B, chunk, ...]; others lead with it
    REQUIRE(n >= 4);
    // A mutant planted "at" index 0 is no mutant: the exact values pass, nothing to bisect.
    std::map<std::string, std::vector<double>> exact;
    for (const auto& o : g.outputs) {  // exact outputs: their spec-rounded answer (the emulation)
      auto& v = exact[o.expected.name];
      v = o.expected.data;
      if (o.rounded)
        for (size_t i = 0; i < v.size(); ++i) v[i] = decode(o.expected.dtype, (*o.rounded)[i]);
    }
    exact[c.walked] = walked->data;
    write_mutant(d / "exact.h5", g, exact, c.walked);
    const auto ok = bisect_file(g, d / "exact.h5");
    INFO(c.op << "/" << c.golden << "\n" << ok.text());
    REQUIRE_FALSE(ok.any_bad());
    REQUIRE(ok.stages.size() == 1);
    for (int rep = 0; rep < 2; ++rep) {
      const int64_t k = 1 + static_cast<int64_t>(rng.u01() * static_cast<double>(n - 2));  // 1 .. n-2
      write_mutant(d / "bad.h5", g, op->plant(*fc, in, k), c.walked);
      auto r = bisect_file(g, d / "bad.h5");
      INFO(c.op << "/" << c.golden << " planted at " << c.label << " index " << k << "\n" << r.text());
      REQUIRE(r.any_bad());
      const BisectStage* b = r.first_bad_stage();
      REQUIRE(b);
      CHECK(b->name == c.walked);
      CHECK(b->first_bad == k);
      CHECK(b->before_ratio <= 1.0);
      CHECK(b->first_bad_ratio > 1.0);
      const std::string where = c.label == "step" ? fmt::format("step {}", k + 1) : fmt::format("chunk {}", k);
      CHECK_THAT(r.text(), assay_test::Contains("first bad: " + c.walked));
      CHECK_THAT(r.text(), assay_test::Contains("at " + where + " ("));
      if (c.label == "chunk") {  // the outputs first go wrong in the chunk that reads the bad state
        const auto& o = r.outputs.front();
        CHECK(o.bad);
        CHECK(o.chunk == k);
      }
      // The repro bundle: the step into k alone; compare re-runs on it and finds it wrong.
      REQUIRE(write_bisect_bundle(g, r, (d / "bundle").string()));
      const Golden bg = read_golden(r.repro_golden);
      CHECK(bg.prov.level == "bisect");
      CHECK_FALSE(check_stale(bg, (fs::path(ASSAY_SOURCE_DIR) / "fixtures").string()).stale);
      const Output* bo = bg.output(c.walked);
      REQUIRE(bo);
      CHECK(bo->expected.shape[static_cast<size_t>(b->walk_dim)] == 2);  // in and out of the step
      CHECK(fs::file_size(r.repro_golden) < fs::file_size(ASSAY_SOURCE_DIR + std::string("/golden/") + c.op + "/" + c.golden + ".h5"));
      const auto policy = TolerancePolicy::for_ops(std::string(ASSAY_SOURCE_DIR) + "/fixtures", {c.op});
      const auto res = judge_candidate(bg, policy, h5::File::open_read(r.repro_candidate), CandidateJudging{});
      CHECK(res.verdict == Verdict::Incorrect);
      for (const auto& t : res.reports)
        if (t.name == c.walked) CHECK(t.verdict == Verdict::Incorrect);
    }
  }
}

TEST_CASE("bisect: an intermediate wrong only as a whole (a never-pass rule) names no step and writes no bundle",
          "[cpu][L0]") {
  // The golden's chunk states made tiny (1e-7, bound 0: inside the entry's atol of 1e-6 everywhere),
  // the candidate's all zero: every element passes, the all-zero rule does not.
  auto g = read_golden((fs::path(ASSAY_SOURCE_DIR) / "golden/gated_delta/t300_c64_gva_l2.h5").string());
  for (auto& t : g.intermediates)
    if (t.name == "chunk_states") std::fill(t.data.begin(), t.data.end(), 1e-7);
  auto& b = g.intermediate_bounds.at("chunk_states");
  std::fill(b.begin(), b.end(), 0.0);
  std::map<std::string, std::vector<double>> vals;
  for (const auto& o : g.outputs) vals[o.expected.name] = o.expected.data;
  vals["chunk_states"].assign(g.intermediate("chunk_states")->data.size(), 0.0);
  const auto d = assay_test::fresh_dir("assay_test_bisect", "whole");
  write_mutant(d / "zero.h5", g, vals, "chunk_states");
  auto r = bisect_file(g, d / "zero.h5");
  INFO(r.text());
  REQUIRE(r.any_bad());
  REQUIRE(r.stages.size() == 1);
  CHECK(r.stages[0].bad);
  CHECK(r.stages[0].first_bad == -1);
  CHECK(r.first_bad_stage() == nullptr);
  CHECK_THAT(r.text(), assay_test::Contains("first bad: no single step"));
  CHECK_THAT(r.text(), assay_test::Contains("also bad: chunk_states as a whole"));
  CHECK_FALSE(write_bisect_bundle(g, r, (d / "bundle").string()));
}
