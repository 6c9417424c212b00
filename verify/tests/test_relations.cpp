// Relations that need no oracle (verify/run/relations.h, issue 40 item 2), on the CPU: the related
// cases derived from committed goldens (sub-batches, splits at T1, packed sequences unpacked), their
// reassembly, and the judge. The "kernel" here is each op's own fp64 oracle (OpDef::run) on the
// related case, rounded to the output dtypes: a correct kernel, which every check must accept on
// every forward L0 golden; host kernels with one planted defect must be rejected by the check that
// shows it, the failure naming the check, the sequence and the first bad element.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

#include <fmt/format.h>

#include "catch_compat.h"
#include "fixtures/gen/case.h"
#include "fixtures/gen/inputs.h"
#include "fixtures/gen/op.h"
#include "reference/core/check.h"
#include "tests/common.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/run/runner_internal.h"
#include "verify/judge/tolerance.h"
#include "verify/run/relations.h"

namespace fs = std::filesystem;
using namespace assay;
using relations::Check;

namespace {

const std::string kFixtures = std::string(ASSAY_SOURCE_DIR) + "/fixtures";
const std::string kGolden = std::string(ASSAY_SOURCE_DIR) + "/golden";

const TolerancePolicy& policy() {
  static const TolerancePolicy p = TolerancePolicy::for_ops(kFixtures, {"ssd", "gated_delta", "mamba3", "attention"});
  return p;
}

Golden golden(const std::string& op, const std::string& c) { return read_golden(kGolden + "/" + op + "/" + c + ".h5"); }

// A host kernel: the op's oracle on (case fields, inputs), outputs rounded to their dtypes. `mutate`
// may change the inputs first (a planted defect).
using Mutate = std::function<void(const kernels::KernelCase&, std::vector<Tensor>&)>;

relations::RunFn oracle_kernel(Mutate mutate = nullptr) {
  return [mutate](const kernels::KernelCase& kc, const std::vector<Tensor>& ins0,
                  std::map<std::string, std::vector<uint64_t>>& codes) -> std::string {
    std::vector<Tensor> ins = ins0;
    if (mutate) mutate(kc, ins);
    // The related case as a one-case fixture (its resolved fields are TOML lines).
    const fs::path dir = fs::temp_directory_path() / fmt::format("assay_rel_{}", ::getpid());
    fs::create_directories(dir);
    const fs::path f = dir / (kc.op + ".toml");
    // Defaults that TOML cannot spell (dt_max = inf) are left out: the fixture applies them again.
    CaseFields spelled;
    for (const auto& [key, v] : kc.fields.all())
      if (!(std::holds_alternative<double>(v) && !std::isfinite(std::get<double>(v)))) spelled.set(key, v);
    std::ofstream(f) << fmt::format("op = \"{}\"\n\n[[case]]\nname = \"rel\"\nlevel = \"L0\"\nseed = 1\n{}\n", kc.op, spelled.str());
    const auto fx = gen::load_fixture(f.string());
    const gen::Case& c = fx.cases.at(0);
    gen::Inputs in(c);
    for (const auto& t : ins) in.add_values(t.name, t.axes, t.shape, t.dtype, t.data);
    const gen::OpDef* op = gen::find_op(kc.op);
    if (!op) return "no op " + kc.op;
    const OracleResult r = op->run(c, in);
    for (const auto& spec : kc.outputs) {
      auto it = std::find_if(r.outputs.begin(), r.outputs.end(), [&](const Output& o) { return o.expected.name == spec.name; });
      if (it == r.outputs.end()) return "the oracle has no output " + spec.name;
      if (it->expected.shape != spec.shape) return "shape of " + spec.name;
      auto& v = codes[spec.name];
      for (double x : it->expected.data) v.push_back(encode(spec.dtype, x));
    }
    return "";
  };
}

// The golden case's one run by the same kernel.
std::vector<std::vector<uint64_t>> base_run(const Golden& g, const relations::RunFn& k) {
  relations::SubRun r;
  r.fields = g.case_fields;
  r.inputs = g.inputs;
  for (const auto& o : g.outputs) r.outputs.push_back({o.expected.name, o.expected.axes, o.expected.shape, o.expected.dtype});
  std::map<std::string, std::vector<uint64_t>> codes;
  const std::string err = k(relations::kernel_case_of(g, r), r.inputs, codes);
  REQUIRE(err.empty());
  std::vector<std::vector<uint64_t>> v;
  for (const auto& o : g.outputs) v.push_back(codes.at(o.expected.name));
  return v;
}

relations::CheckVerdict run_check(const Golden& g, const Check& c, const relations::RunFn& k,
                                  const std::vector<std::vector<uint64_t>>& base, std::string profile = "strict") {
  const auto e = relations::execute_check(c, g, nullptr, k);
  return relations::judge_check(c, g, policy(), profile, base, e);
}

const Check& find_check(const std::vector<Check>& cs, const std::string& name) {
  auto it = std::find_if(cs.begin(), cs.end(), [&](const Check& c) { return c.name == name; });
  REQUIRE(it != cs.end());
  return *it;
}

const std::vector<std::string> kAll{"batch", "continuation", "varlen"};

}  // namespace

TEST_CASE("gather along an axis (sub-batches, token ranges, an appended copy)") {
  Tensor t{"x", {"B", "T"}, {2, 3}, DType::f32, {0, 1, 2, 10, 11, 12}};
  auto a = relations::gather(t, 0, {1});
  CHECK(a.shape == Shape{1, 3});
  CHECK(a.data == std::vector<double>{10, 11, 12});
  auto b = relations::gather(t, 1, {1, 2});
  CHECK(b.data == std::vector<double>{1, 2, 11, 12});
  auto c = relations::gather(t, 0, {0, 1, 1});
  CHECK(c.shape == Shape{3, 3});
  CHECK(c.data.back() == 12);
  CHECK_THROWS(relations::gather(t, 0, {2}));
}

TEST_CASE("the checks planned for an ssd golden (B = 2, initial states, T = 65, chunk 64)") {
  const Golden g = golden("ssd", "t65_q64_init");
  const auto cs = relations::plan_checks(g, kAll, true);
  REQUIRE(cs.size() == 4);
  const Check& alone = find_check(cs, "batch.alone");
  CHECK(alone.not_applicable.empty());
  REQUIRE(alone.runs.size() == 2);
  CHECK(alone.runs[1].sequence == 1);
  CHECK(alone.runs[1].fields.get_int("B") == 1);
  CHECK(alone.bitwise);
  const Check& ext = find_check(cs, "batch.extended");
  REQUIRE(ext.runs.size() == 1);
  CHECK(ext.runs[0].fields.get_int("B") == 3);
  const Check& cont = find_check(cs, "continuation");
  REQUIRE(cont.runs.size() == 2);
  // Half of 65 is 32, off the chunk grid; the second run is seeded by the first's final states.
  CHECK(cont.runs[0].fields.get_int("T") == 32);
  CHECK(cont.runs[1].fields.get_int("T") == 33);
  CHECK(cont.runs[1].fields.get_bool("initial_states"));
  REQUIRE(cont.runs[1].handovers.size() == 1);
  CHECK(cont.runs[1].handovers[0].from_output == "final_states");
  CHECK_FALSE(cont.bitwise);
  const Check& vl = find_check(cs, "varlen");
  CHECK(vl.not_applicable == "not a packed (varlen) case");
  CHECK(vl.runs.empty());
  CHECK_THROWS_AS(relations::plan_checks(g, {"layout"}, false), InputError);
}

TEST_CASE("a packed ssd golden unpacks into its sequences, the empty one named") {
  const Golden g = golden("ssd", "varlen_midchunk");  // seqlens 40 | 0 | 100 | 7 | 153
  const auto cs = relations::plan_checks(g, kAll, false);
  CHECK(find_check(cs, "batch.alone").not_applicable.find("packed") != std::string::npos);
  CHECK(find_check(cs, "continuation").not_applicable == "a packed (varlen) case");
  const Check& vl = find_check(cs, "varlen");
  REQUIRE(vl.runs.size() == 4);
  CHECK(vl.runs[1].sequence == 2);
  CHECK(vl.runs[1].fields.get_int("T") == 100);
  CHECK(vl.runs[1].label == "sequence 2 (tokens [40, 140)) as a dense case");
  for (const auto& t : vl.runs[1].inputs) CHECK((t.name != "seq_idx" && t.name != "cu_seqlens"));
  REQUIRE(vl.notes.size() == 1);
  CHECK(vl.notes[0].find("sequence 1 is empty") != std::string::npos);
  // The varlen_states of sequence 3 come from run 2; the packed final_states from the last sequence.
  const Output* vs = g.output("varlen_states");
  REQUIRE(vs);
  CHECK(relations::run_of(vl, g, "varlen_states", 3 * (vs->expected.size() / 5)) == 2);
  CHECK(relations::run_of(vl, g, "final_states", 0) == 3);
  CHECK(relations::run_of(vl, g, "varlen_states", 1 * (vs->expected.size() / 5)) == -1);
}

TEST_CASE("the oracle as a kernel passes every check on every forward L0 golden (no false alarm)") {
  int ran = 0, passed = 0;
  std::map<std::string, int> by_check;
  for (const std::string op : {"ssd", "gated_delta", "mamba3", "attention"}) {
    for (const auto& e : fs::directory_iterator(kGolden + "/" + op)) {
      if (e.path().extension() != ".h5") continue;
      const Golden g = read_golden(e.path().string());
      if (g.case_fields.get_bool("backward", false)) continue;
      const auto cs = relations::plan_checks(g, kAll, false);
      bool any = false;
      for (const auto& c : cs) any = any || c.not_applicable.empty();
      if (!any) continue;
      const auto k = oracle_kernel();
      const auto base = base_run(g, k);
      for (const auto& c : cs) {
        if (!c.not_applicable.empty()) continue;
        const auto v = run_check(g, c, k, base);
        ++ran;
        ++by_check[op + " " + c.name];
        passed += v.verdict == Verdict::Passed;
        INFO(op << "/" << g.prov.case_name << "@" << c.name << ": " << v.reason);
        CHECK(v.verdict == Verdict::Passed);
        CHECK(v.covered > 0);
      }
    }
  }
  for (const auto& [k, n] : by_check) fmt::print(stderr, "  {}: {} goldens\n", k, n);
  // Every check of every op that has it ran somewhere.
  for (const std::string k : {"ssd batch.alone", "ssd batch.extended", "ssd continuation", "ssd varlen", "gated_delta batch.alone",
                              "gated_delta batch.extended", "gated_delta continuation", "gated_delta varlen", "mamba3 batch.alone",
                              "mamba3 batch.extended", "mamba3 continuation", "mamba3 varlen", "attention batch.alone",
                              "attention batch.extended"})
    CHECK(by_check[k] > 0);
  CHECK(ran >= 30);
  CHECK(passed == ran);
}

TEST_CASE("a kernel reading its batch neighbour's initial state on odd B is caught by batch.extended only") {
  // The GPU mutant ssd_mutant_init_neighbour_odd_b on the host: with B odd and > 1, sequence b reads
  // the initial states of sequence (b + 1) % B. The L0 ssd goldens have B = 1 or 2: only the
  // extended batch (B + 1 = 3) shows it.
  const Mutate neighbour = [](const kernels::KernelCase&, std::vector<Tensor>& ins) {
    for (auto& t : ins)
      if (t.name == "initial_states" && t.shape[0] % 2 == 1 && t.shape[0] > 1) {
        std::vector<int64_t> idx;
        for (int64_t b = 0; b < t.shape[0]; ++b) idx.push_back((b + 1) % t.shape[0]);
        t = relations::gather(t, 0, idx);
      }
  };
  const Golden g = golden("ssd", "t65_q64_init");
  const auto k = oracle_kernel(neighbour);
  const auto base = base_run(g, k);
  // The golden case itself (B = 2) does not show it: its one run is the oracle's.
  const auto ok = oracle_kernel();
  CHECK(base == base_run(g, ok));
  const auto cs = relations::plan_checks(g, {"batch"}, false);
  CHECK(run_check(g, find_check(cs, "batch.alone"), k, base).verdict == Verdict::Passed);
  const auto v = run_check(g, find_check(cs, "batch.extended"), k, base);
  INFO(v.reason);
  CHECK(v.verdict == Verdict::Incorrect);
  CHECK(v.reason.find("relation batch.extended") != std::string::npos);
  CHECK(v.reason.find("sequence 0") != std::string::npos);
  // Outputs are judged in the golden's order (final_states before out): the first bad element is a state.
  CHECK(v.reason.find("'final_states' [b=0, h=") != std::string::npos);
}

TEST_CASE("a short seeded call that drops its state is caught by continuation, naming the run") {
  // A chunked prefill's piece shorter than one chunk (1 < T < Q) that ignores its initial states.
  const Mutate drop = [](const kernels::KernelCase& kc, std::vector<Tensor>& ins) {
    const int64_t T = kc.fields.get_int("T"), Q = kc.fields.get_int("chunk_size", 64);
    if (T > 1 && T < Q)
      for (auto& t : ins)
        if (t.name == "initial_states") std::fill(t.data.begin(), t.data.end(), 0.0);
  };
  const Golden g = golden("ssd", "t1000_q64");  // T = 1000: no L0 call is a short seeded one...
  const auto k = oracle_kernel(drop);
  const auto base = base_run(g, k);
  CHECK(base == base_run(g, oracle_kernel()));
  const auto cs = relations::plan_checks(g, {"continuation"}, false);
  CHECK(run_check(g, cs.at(0), k, base).verdict == Verdict::Passed);  // ...nor are its halves (499, 501)
  const Golden g2 = golden("ssd", "t65_q64_init");                    // halves 32 and 33 are
  const auto base2 = base_run(g2, oracle_kernel(drop));
  const auto v = run_check(g2, relations::plan_checks(g2, {"continuation"}, false).at(0), oracle_kernel(drop), base2);
  INFO(v.reason);
  CHECK(v.verdict == Verdict::Incorrect);
  CHECK(v.reason.find("relation continuation") != std::string::npos);
  CHECK(v.reason.find("sequence 0 (tokens [32, 65)), 'final_states'") != std::string::npos);
}

TEST_CASE("bitwise batch invariance tells an ulp from a tolerance") {
  // One ulp more on the first output element whenever the batch holds one sequence: within the
  // golden's tolerance, but not the same bits.
  const relations::RunFn ulp = [inner = oracle_kernel()](const kernels::KernelCase& kc, const std::vector<Tensor>& ins,
                                                         std::map<std::string, std::vector<uint64_t>>& codes) {
    std::string err = inner(kc, ins, codes);
    if (err.empty() && kc.fields.get_int("B") == 1) codes.at("out")[0] += 1;
    return err;
  };
  const Golden g = golden("ssd", "t65_q64_init");
  const auto base = base_run(g, ulp);
  const auto loose = relations::plan_checks(g, {"batch"}, false);
  const auto v1 = run_check(g, find_check(loose, "batch.alone"), ulp, base);
  INFO(v1.reason);
  CHECK(v1.verdict == Verdict::Passed);
  CHECK(v1.differing == 2);  // each sequence's first element, in its own run
  const auto strict = relations::plan_checks(g, {"batch"}, true);
  const auto v2 = run_check(g, find_check(strict, "batch.alone"), ulp, base);
  INFO(v2.reason);
  CHECK(v2.verdict == Verdict::Incorrect);
  CHECK(v2.reason.find("bitwise") != std::string::npos);
  CHECK(v2.reason.find("sequence 0 (sequence 0 alone (B = 1)), 'out' [b=0, t=0, h=0, p=0]") != std::string::npos);
}

TEST_CASE("a related case the kernel refuses is NotSupported, a failed run is Failed") {
  const Golden g = golden("ssd", "t65_q64_init");
  const auto cs = relations::plan_checks(g, {"continuation"}, false);
  const auto base = base_run(g, oracle_kernel());
  const auto ns = relations::execute_check(cs.at(0), g, [](const kernels::KernelCase&) { return kernels::Support{false, "T < 64"}; },
                                           oracle_kernel());
  const auto v = relations::judge_check(cs.at(0), g, policy(), "strict", base, ns);
  CHECK(v.verdict == Verdict::NotSupported);
  CHECK(v.reason.find("T < 64") != std::string::npos);
  const auto err = relations::execute_check(cs.at(0), g, nullptr,
                                            [](const kernels::KernelCase&, const std::vector<Tensor>&,
                                               std::map<std::string, std::vector<uint64_t>>&) { return std::string("boom"); });
  CHECK(relations::judge_check(cs.at(0), g, policy(), "strict", base, err).verdict == Verdict::Failed);
  // A kernel that leaves an output out of its related run.
  const auto missing = relations::execute_check(
      cs.at(0), g, nullptr,
      [](const kernels::KernelCase&, const std::vector<Tensor>&, std::map<std::string, std::vector<uint64_t>>&) { return std::string(); });
  CHECK(missing.status == "error");
  CHECK(missing.message.find("output 'final_states' missing") != std::string::npos);
}

TEST_CASE("the worker's record of the checks reads back in the runner as one row per check") {
  // What `assay __worker --relations` writes (write_executed, beside /outputs in the candidate) and what
  // `assay verify --relations` reads (runner_detail::judge_relations), round-tripped on the CPU with
  // host kernels in place of the GPU launch: the oracle, and the neighbour-state defect.
  const Golden g = golden("ssd", "t65_q64_init");
  kernels::KernelDef k;
  k.op = "ssd";
  k.name = "host_oracle";
  k.relations = {"batch", "continuation", "varlen"};
  k.batch_invariant = false;
  const Mutate neighbour = [](const kernels::KernelCase&, std::vector<Tensor>& ins) {
    for (auto& t : ins)
      if (t.name == "initial_states" && t.shape[0] % 2 == 1 && t.shape[0] > 1) t = relations::gather(t, 0, {1, 2, 0});
  };
  for (const bool broken : {false, true}) {
    const auto kern = broken ? oracle_kernel(neighbour) : oracle_kernel();
    const auto base = base_run(g, kern);
    const auto checks = relations::plan_checks(g, k.relations, k.batch_invariant);
    std::vector<relations::Executed> done;
    for (const auto& c : checks) done.push_back(c.not_applicable.empty() ? relations::execute_check(c, g, nullptr, kern) : relations::Executed{});
    const auto path = (fs::temp_directory_path() / fmt::format("assay_rel_cand_{}_{}.h5", ::getpid(), broken)).string();
    {
      auto f = h5::File::create(path);
      f.create_group("/outputs");
      for (size_t k2 = 0; k2 < g.outputs.size(); ++k2) {
        const Tensor& e = g.outputs[k2].expected;
        f.write("/outputs/" + e.name, h5::Elem::u64, e.shape, base[k2].data());
        f.set_attr("/outputs/" + e.name, "dtype", std::string(name(e.dtype)));
      }
      relations::write_executed(f, g, checks, done);
      f.close();
    }
    CaseResult base_row;
    base_row.kernel = k.name;
    base_row.op = "ssd";
    base_row.case_name = g.prov.case_name;
    const auto rows = runner_detail::judge_relations(base_row, g, k, path, policy());
    std::map<std::string, CaseResult> by;
    for (const auto& r : rows) by[r.case_name] = r;
    REQUIRE(rows.size() == 4);
    CHECK(by.at("t65_q64_init@batch.alone").verdict == Verdict::Passed);
    CHECK(by.at("t65_q64_init@continuation").verdict == Verdict::Passed);
    CHECK(by.at("t65_q64_init@varlen").verdict == Verdict::NotSupported);
    CHECK(by.at("t65_q64_init@varlen").relation == "varlen");
    const auto& ext = by.at("t65_q64_init@batch.extended");
    INFO(ext.reason);
    CHECK(ext.verdict == (broken ? Verdict::Incorrect : Verdict::Passed));
    if (broken) CHECK(ext.reason.find("relation batch.extended") != std::string::npos);
    fs::remove(path);
  }
  // A candidate written without --relations: each formed check is Failed, naming the missing group.
  const auto path = (fs::temp_directory_path() / fmt::format("assay_rel_cand_{}_none.h5", ::getpid())).string();
  {
    const auto base = base_run(g, oracle_kernel());
    auto f = h5::File::create(path);
    f.create_group("/outputs");
    for (size_t k2 = 0; k2 < g.outputs.size(); ++k2) {
      const Tensor& e = g.outputs[k2].expected;
      f.write("/outputs/" + e.name, h5::Elem::u64, e.shape, base[k2].data());
      f.set_attr("/outputs/" + e.name, "dtype", std::string(name(e.dtype)));
    }
    f.close();
  }
  CaseResult base_row;
  base_row.case_name = g.prov.case_name;
  const auto rows = runner_detail::judge_relations(base_row, g, k, path, policy());
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].verdict == Verdict::Failed);
  CHECK(rows[0].reason.find("/relations/batch.alone: missing") != std::string::npos);
  fs::remove(path);
}

TEST_CASE("a sampled golden plans no relation runs, each check saying why") {
  Golden g = golden("ssd", "t65_q64_init");
  g.sample = default_sample(2, 4, 65, 8);  // as a sampled golden of the same case would carry
  const auto checks = relations::plan_checks(g, {"batch", "continuation", "varlen"}, false);
  REQUIRE(!checks.empty());
  for (const auto& c : checks) {
    INFO(c.name);
    CHECK(c.runs.empty());
    // varlen is not applicable for its own reason first (this case is not packed)
    if (c.family != "varlen") CHECK_THAT(c.not_applicable, assay_test::Contains("a sampled golden"));
    else CHECK(!c.not_applicable.empty());
  }
}
