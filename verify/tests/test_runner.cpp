// CPU tests of the GPU gate's host side: process isolation and the watchdog (with fake workers),
// worker-outcome classification, sharding, poison and canary checks on host buffers, sanitizer
// summary parsing, the plugin loader's refusals, reports, and `assay verify` without a GPU.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <type_traits>

#include <toml++/toml.h>

#include "catch_compat.h"
#include "kernels/registry.h"
#include "reference/core/check.h"
#include "verify/judge/error_profile.h"
#include "verify/run/kernel_case.h"
#include "verify/report/report.h"
#include "verify/report/report_html.h"
#include "verify/tests/cli_helpers.h"
#include "verify/run/runner.h"
#include "verify/run/sanitize.h"
#include "verify/run/worker.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {
using assay_test::Run;
using assay_test::slurp;
fs::path tmpdir(const std::string& name) { return assay_test::fresh_dir("assay_test_runner", name); }
// Runs assay with every GPU hidden (CUDA_VISIBLE_DEVICES=""), so the CPU tests behave the same on a
// GPU machine.
Run run(const std::string& args) { return assay_test::run_assay(args, "env CUDA_VISIBLE_DEVICES= "); }
}  // namespace

TEST_CASE("the watchdog kills a hung worker and its whole process group", "[cpu][L0]") {
  auto d = tmpdir("watchdog");
  // The "worker" starts a grandchild that would outlive it, then sleeps; both must die.
  const auto pidfile = (d / "grandchild.pid").string();
  const auto r = run_process({"/bin/sh", "-c", "sleep 30 & echo $! > " + pidfile + "; sleep 30"}, 0.5, (d / "log").string());
  CHECK(r.started);
  CHECK(r.timed_out);
  CHECK(r.wall_s >= 0.5);
  CHECK(r.wall_s < 5.0);
  const auto gc = slurp(pidfile);
  REQUIRE(!gc.empty());
  // The grandchild was in the worker's process group: gone (or a zombie reaped by init) now.
  bool alive = false;
  for (int i = 0; i < 50; ++i) {
    std::ifstream st("/proc/" + std::to_string(std::stoi(gc)) + "/stat");
    std::string s;
    std::getline(st, s);
    alive = !s.empty() && s.find(") Z") == std::string::npos;
    if (!alive) break;
    ::usleep(20000);
  }
  CHECK_FALSE(alive);
  const auto w = classify_worker(r, "", "", 0.5, "");
  CHECK(w.verdict == Verdict::Hung);
  CHECK_THAT(w.reason, assay_test::Contains("watchdog"));
}

TEST_CASE("a crashing or failing worker is a Failed verdict with the cause", "[cpu][L0]") {
  auto d = tmpdir("crash");
  const auto seg = run_process({"/bin/sh", "-c", "kill -SEGV $$"}, 10, (d / "log").string());
  REQUIRE(seg.signaled);
  CHECK(seg.signal == SIGSEGV);
  auto w = classify_worker(seg, "", "", 10, "");
  CHECK(w.verdict == Verdict::Failed);
  CHECK_THAT(w.reason, assay_test::Contains("SIGSEGV"));

  const auto ex = run_process({"/bin/sh", "-c", "echo boom; exit 1"}, 10, (d / "log2").string());
  REQUIRE(ex.exited);
  CHECK(ex.exit_code == 1);
  CHECK(slurp(d / "log2") == "boom\n");
  w = classify_worker(ex, R"J({"status":"cuda_error","message":"run 0: after the kernel: cudaErrorIllegalAddress (an illegal memory access was encountered)"})J",
                      "", 10, "");
  CHECK(w.verdict == Verdict::Failed);
  CHECK_THAT(w.reason, assay_test::Contains("cudaErrorIllegalAddress"));
  // No result file at all.
  w = classify_worker(ex, "", "", 10, "");
  CHECK(w.verdict == Verdict::Failed);
  CHECK_THAT(w.reason, assay_test::Contains("exited with code 1"));

  const auto nx = run_process({"/nonexistent/worker"}, 10, (d / "log3").string());
  CHECK(nx.exited);
  CHECK(nx.exit_code == 127);
  CHECK_THAT(slurp(d / "log3"), assay_test::Contains("cannot execute"));

  // A clean worker with canary findings is Failed; without, it goes on to compare (Passed here).
  ProcResult ok;
  ok.started = ok.exited = true;
  ok.exit_code = 0;
  w = classify_worker(ok, R"J({"status":"ok","findings":["run 0: canary: output 'out': 2 guard bytes AFTER"],"kernel_ms":[0.01,0.01]})J", "", 10, "");
  CHECK(w.verdict == Verdict::Failed);
  CHECK_THAT(w.reason, assay_test::Contains("canary"));
  w = classify_worker(ok, R"J({"status":"ok","findings":[],"kernel_ms":[0.5,0.25]})J", "", 10, "");
  CHECK(w.verdict == Verdict::Passed);
  CHECK(w.kernel_ms == std::vector<double>{0.5, 0.25});
  // Under a sanitizer: a missing summary is a failure; errors are a failure; 0 errors goes on.
  w = classify_worker(ok, R"J({"status":"ok","findings":[]})J", "program output only\n", 10, "memcheck");
  CHECK(w.verdict == Verdict::Failed);
  CHECK_THAT(w.reason, assay_test::Contains("no summary"));
  w = classify_worker(ok, R"J({"status":"ok","findings":[]})J", "========= ERROR SUMMARY: 0 errors\n", 10, "memcheck");
  CHECK(w.verdict == Verdict::Passed);
  ProcResult san = ok;
  san.exit_code = kSanitizerErrorExit;
  w = classify_worker(san, R"J({"status":"ok","findings":[]})J", "========= ERROR SUMMARY: 3 errors\n", 10, "memcheck");
  CHECK(w.verdict == Verdict::Failed);
  CHECK_THAT(w.reason, assay_test::Contains("memcheck: 3 errors"));
}

TEST_CASE("sanitizer summaries: error totals, racecheck's parentheses, the last line wins", "[cpu][L0]") {
  auto s = parse_sanitizer_output("x\n========= ERROR SUMMARY: 1 error\n", "memcheck");
  CHECK(s.found);
  CHECK(s.errors == 1);
  s = parse_sanitizer_output("========= ERROR SUMMARY: 0 errors\nmore\n========= ERROR SUMMARY: 12 errors\n", "initcheck");
  CHECK(s.errors == 12);
  // With more errors than --print-limit, a second line counts the ones not printed: not the total.
  s = parse_sanitizer_output("========= ERROR SUMMARY: 10496 errors\n"
                             "========= ERROR SUMMARY: 10396 errors were not printed. Use --print-limit option to adjust\n",
                             "synccheck");
  CHECK(s.errors == 10496);
  s = parse_sanitizer_output("========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)\n", "racecheck");
  CHECK(s.found);
  CHECK(s.hazards == 3);
  CHECK(s.errors == 2);
  CHECK(s.warnings == 1);
  s = parse_sanitizer_output("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", "racecheck");
  CHECK(s.found);
  CHECK(s.errors == 0);
  CHECK_FALSE(parse_sanitizer_output("========= Program hit cudaErrorLaunchFailure\n", "synccheck").found);
  const auto p = sanitizer_prefix("compute-sanitizer", "memcheck");
  CHECK(std::find(p.begin(), p.end(), "--leak-check") != p.end());
  CHECK(std::find(p.begin(), p.end(), "--error-exitcode") != p.end());
  CHECK(valid_sanitizer_tool("synccheck"));
  CHECK_FALSE(valid_sanitizer_tool("leakcheck"));
}

TEST_CASE("poison codes are NaN (or invalid) and differ between the two runs", "[cpu][L0]") {
  for (auto t : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::e2m1, DType::ue8m0}) {
    for (int r : {0, 1}) {
      INFO(name(t) << " run " << r);
      CHECK(std::isnan(worker::decode_code(t, worker::poison_code(t, r))));
    }
    if (t != DType::ue8m0) CHECK(worker::poison_code(t, 0) != worker::poison_code(t, 1));  // ue8m0 has one NaN
  }
  for (auto t : {DType::i8, DType::u8, DType::i32, DType::u32, DType::i64}) CHECK(worker::poison_code(t, 0) != worker::poison_code(t, 1));
  // Fill and unpack round-trip, little-endian.
  std::vector<uint8_t> b(3 * 2);
  worker::fill_code(b.data(), 3, 2, 0x7FC1);
  CHECK(b[0] == 0xC1);
  CHECK(b[1] == 0x7F);
  CHECK(worker::unpack_codes(b.data(), 3, 2) == std::vector<uint64_t>{0x7FC1, 0x7FC1, 0x7FC1});
}

TEST_CASE("guard bands: intact, one element past the end, one before the start", "[cpu][L0]") {
  const size_t G = worker::kGuardBytes, payload = 10 * 2;  // 10 bf16
  std::vector<uint8_t> buf(G + payload + G);
  worker::fill_guard(buf.data(), G);
  worker::fill_guard(buf.data() + G + payload, G);
  CHECK(worker::check_guard(buf.data(), G).changed == 0);
  CHECK(worker::check_guard(buf.data() + G + payload, G).changed == 0);
  // The pattern is not a constant: a kernel writing one constant everywhere cannot match it.
  std::set<uint8_t> distinct(buf.begin(), buf.begin() + 256);
  CHECK(distinct.size() > 64);
  // out[10] = 1.0 bf16 (0x3F80): writes bytes +0 and +1 after the end.
  buf[G + payload] = 0x80;
  buf[G + payload + 1] = 0x3F;
  auto c = worker::check_guard(buf.data() + G + payload, G);
  // One of the two bytes might coincide with the pattern; at least one must differ.
  CHECK(c.changed >= 1);
  CHECK(c.first <= 1);
  CHECK_THAT(worker::describe_guard("out", false, c, G), assay_test::Contains("AFTER the last element"));
  // out[-1]: the last two bytes of the leading band.
  buf[G - 1] ^= 0xFF;
  c = worker::check_guard(buf.data(), G);
  CHECK(c.changed == 1);
  CHECK(c.last == static_cast<int64_t>(G - 1));
  CHECK_THAT(worker::describe_guard("out", true, c, G), assay_test::Contains("bytes -1..-1"));
}

TEST_CASE("sharding splits the work into disjoint, complete, stable parts", "[cpu][L0]") {
  kernels::KernelDef a, b;
  a.op = b.op = "scaled_add";
  a.name = "ka";
  b.name = "kb";
  std::vector<const kernels::KernelDef*> ks{&b, &a};
  std::vector<std::string> gs{"/g/scaled_add/c1.h5", "/g/scaled_add/c2.h5", "/g/scaled_add/c3.h5", "/g/other/c1.h5"};
  const auto all = plan_work(ks, gs, {}, {}, Shard{});
  REQUIRE(all.size() == 6);  // 2 kernels x 3 scaled_add cases; the other op has no kernel
  CHECK(all.front().kernel->name == "ka");
  CHECK(all.front().case_name == "c1");
  for (int n : {1, 2, 3, 4, 7}) {
    std::multiset<std::string> seen;
    for (int k = 1; k <= n; ++k)
      for (const auto& w : plan_work(ks, gs, {}, {}, Shard{k, n})) seen.insert(w.kernel->name + "/" + w.case_name);
    CHECK(seen.size() == all.size());
    CHECK(std::set<std::string>(seen.begin(), seen.end()).size() == all.size());
  }
  CHECK(plan_work(ks, gs, {"kb"}, {"c[23]"}, Shard{}).size() == 2);
  CHECK(Shard::parse("2/4").k == 2);
  CHECK_THROWS_AS(Shard::parse("0/4"), assay::InputError);
  CHECK_THROWS_AS(Shard::parse("5/4"), assay::InputError);
  CHECK_THROWS_AS(Shard::parse("2-4"), assay::InputError);
  CHECK_THROWS_AS(Shard::parse("2/4x"), assay::InputError);
}

// A kernel's view of a case has no way to the answer: neither KernelCase nor LaunchContext holds a
// Golden, an Output, expected values, bounds or rounded codes (checked at compile time).
template <class T>
concept HasGolden = requires(const T& x) { x.golden; };
template <class T>
concept HasExpected = requires(const T& x) { x.expected; };
template <class T>
concept HasBound = requires(const T& x) { x.bound; };
template <class T>
concept HasRounded = requires(const T& x) { x.rounded; };
static_assert(!HasGolden<kernels::KernelCase> && !HasGolden<kernels::LaunchContext>);
static_assert(!HasExpected<kernels::TensorSpec> && !HasExpected<kernels::DevTensor>);
static_assert(!HasBound<kernels::TensorSpec> && !HasRounded<kernels::TensorSpec>);
static_assert(std::is_invocable_v<decltype(kernels::KernelDef::can_implement), const kernels::KernelCase&>);
static_assert(!std::is_invocable_v<decltype(kernels::KernelDef::can_implement), const Golden&>);

TEST_CASE("kernels see the resolved case fields and tensor metadata, nothing of the answer", "[cpu][L0]") {
  // Every committed golden: the KernelCase carries its /case fields and every tensor's metadata.
  int with_defaults = 0, n = 0;
  for (const auto& de : fs::recursive_directory_iterator(fs::path(ASSAY_SOURCE_DIR) / "golden")) {
    if (de.path().extension() != ".h5") continue;
    const auto g = read_golden(de.path().string());
    const auto kc = kernel_case_of(g);
    ++n;
    CHECK(kc.fields.all() == g.case_fields.all());
    REQUIRE(kc.outputs.size() == g.outputs.size());
    for (const auto& o : g.outputs) {
      const auto* t = kc.output(o.expected.name);
      REQUIRE(t);
      CHECK(t->shape == (o.sampled ? o.full_shape : o.expected.shape));  // a kernel writes whole tensors
      CHECK(t->dtype == o.expected.dtype);
    }
    // Every top-level field of the case text that is a plain value is resolved ...
    const auto doc = toml::parse(g.prov.case_toml);
    const auto& c = *doc["case"].as_array()->get(0)->as_table();
    for (const auto& [k, v] : c) {
      const std::string key(k.str());
      // Bookkeeping, and how the golden stores inputs (`inputs`) and outputs (`sample`): not kernel fields.
      if (key == "name" || key == "level" || key == "seed" || key == "description" || key == "inputs" || key == "sample" ||
          v.is_table())
        continue;
      INFO(de.path().string() << ": field " << key);
      CHECK(kc.fields.has(key));
    }
    // ... and fields the text leaves out appear with the binding's default.
    with_defaults += kc.fields.all().size() > c.size();
  }
  // The walk saw every committed golden: as many as golden/MANIFEST lists (and at least one).
  int listed = 0;
  std::ifstream manifest(fs::path(ASSAY_SOURCE_DIR) / "golden" / "MANIFEST");
  for (std::string line; std::getline(manifest, line);) listed += !line.empty() && line[0] != '#';
  CHECK(listed > 0);
  CHECK(n == listed);
  CHECK(with_defaults > 0);
}

TEST_CASE("case fields round-trip through their TOML text (the plugin ABI's fields_toml)", "[cpu][L0]") {
  CaseFields f;
  f.set("B", int64_t{3});
  f.set("alpha", 1.0);  // integral double: must read back as a double
  f.set("eps", 1e-8);
  f.set("causal", true);
  f.set("recipe", std::string("a \"quoted\" \\ name"));
  f.set("seqlens_k", std::vector<int64_t>{70, 9, 0});
  f.set("window", std::vector<double>{8.5, -1.0});
  f.set("none", std::vector<int64_t>{});
  const auto r = CaseFields::parse(f.str());
  CHECK(r.all() == f.all());
  CHECK(r.get_int("causal") == 1);
  CHECK(r.get_double("B") == 3.0);
  CHECK(r.get_int("alpha") == 1);
  CHECK_THROWS_AS(r.get_int("eps"), InputError);
  CHECK_THROWS_AS(r.get_double("missing"), InputError);
  CHECK(r.get_double("missing", 7.0) == 7.0);
  CHECK(r.get_list("seqlens_k") == std::vector<double>{70, 9, 0});
  CHECK(r.get_list("B") == std::vector<double>{3});
  CHECK_FALSE(r.has_list("recipe"));
  CHECK_THROWS_AS(CaseFields::parse("x = [\"a\"]"), InputError);
}

TEST_CASE("the plugin loader refuses bad libraries with one line", "[cpu][L0]") {
  CHECK_THROWS_AS(kernels::load_plugin("/nonexistent/libx.so"), assay::InputError);
  // A real shared library that is not a plugin: libc.
  try {
    kernels::load_plugin("libc.so.6");
    FAIL("libc loaded as a plugin");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), assay_test::Contains("not an assay plugin"));
  }
}

TEST_CASE("plugin ABI: version 1 tables load as strict, version 2 carries the precision profile", "[cpu][L0]") {
  const auto v1 = kernels::load_plugin(FAKE_PLUGIN_V1);
  REQUIRE(v1 == std::vector<std::string>{"fake_v1_a", "fake_v1_b"});  // the v1 stride, not v2's
  CHECK(kernels::find_kernel("fake_v1_b")->profile == "strict");
  kernels::load_plugin(FAKE_PLUGIN_V2);
  CHECK(kernels::find_kernel("fake_v2_b")->profile == "strict");
  kernels::load_plugin(FAKE_PLUGIN_V2BAD);
  CHECK(kernels::find_kernel("fake_v2bad_b")->profile == "no-such-profile");
  // The gate refuses a kernel whose profile its op does not declare, before running anything.
  auto r = run(std::string("verify --plugin ") + FAKE_PLUGIN_V2BAD + " --kernel 'fake_*'");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, assay_test::Contains("precision profile 'no-such-profile' is not one of op scaled_add's profiles"));
}

TEST_CASE("plugin ABI: version 4 tables declare the intermediates they write, version 2 and 3 strides still hold",
          "[cpu][L0]") {
  const auto v4 = kernels::load_plugin(FAKE_PLUGIN_V4);
  REQUIRE(v4 == std::vector<std::string>{"fake_v4_a", "fake_v4_b"});  // the v4 stride
  CHECK(kernels::find_kernel("fake_v4_a")->intermediates == std::vector<std::string>{"chunk_states"});
  CHECK(kernels::find_kernel("fake_v4_b")->intermediates.empty());
  CHECK(kernels::find_kernel("fake_v4_b")->profile == "strict");
  kernels::load_plugin(FAKE_PLUGIN_V2);  // the version 2/3 layout ends before intermediates
  CHECK(kernels::find_kernel("fake_v2_a")->intermediates.empty());
  CHECK(kernels::find_kernel("fake_v2_b")->profile == "strict");
}

TEST_CASE("reports: JSON counts and exit code, JUnit failure/error/skipped", "[cpu][L0]") {
  RunReport r;
  r.device = nlohmann::json{{"name", "Fake GPU"}, {"driver", "1.2"}, {"cuda_runtime", "13.0"}};
  auto add = [&](const std::string& k, Verdict v, const std::string& why) {
    CaseResult c;
    c.kernel = k;
    c.op = "scaled_add";
    c.case_name = "int_exact";
    c.verdict = v;
    c.reason = why;
    r.cases.push_back(c);
  };
  add("ok", Verdict::Passed, "fine");
  add("ns", Verdict::NotSupported, "fp32 <out>");
  CHECK(r.exit_code() == 0);
  add("stale", Verdict::Stale, "input 'x' changed");
  CHECK(r.exit_code() == 2);
  add("bad", Verdict::Incorrect, "'out': 1 mismatches & \"quotes\"");
  add("hang", Verdict::Hung, "watchdog");
  CHECK(r.exit_code() == 1);
  const auto j = to_json(r);
  CHECK(j["counts"]["Passed"] == 1);
  CHECK(j["counts"]["Hung"] == 1);
  CHECK(j["exit_code"] == 1);
  CHECK(j["device"]["name"] == "Fake GPU");
  const auto x = to_junit(r);
  CHECK_THAT(x, assay_test::Contains("tests=\"5\" failures=\"1\" errors=\"2\" skipped=\"1\""));
  CHECK_THAT(x, assay_test::Contains("<failure type=\"Incorrect\" message=\"Incorrect: &apos;out&apos;: 1 mismatches &amp; &quot;quotes&quot;\""));
  CHECK_THAT(x, assay_test::Contains("<skipped message=\"NotSupported: fp32 &lt;out&gt;\"/>"));
  CHECK_THAT(x, assay_test::Contains("<property name=\"device\" value=\"Fake GPU\"/>"));
  // HTML: one row per case, text escaped, a section for each case that did not pass; a failing
  // tensor with an error profile gets its three plots and its policy entry's why.
  {
    Output o;
    o.expected = Tensor{"out", {"B", "T", "D"}, {1, 8, 2}, DType::f32, std::vector<double>(16, 1.0)};
    std::vector<double> a(16, 1.0);
    a[9] = 2.0;  // t = 4
    TensorReport t = compare_tensor(o, a, default_tolerance(DType::f32));
    REQUIRE(t.verdict == Verdict::Incorrect);
    attach_error_profile(t, o, a);
    REQUIRE(t.error_profile);
    r.cases[3].tensors.push_back(t);
  }
  const auto h = to_html(r);
  CHECK_THAT(h, assay_test::Contains("<table id=\"verdicts\">"));
  CHECK_THAT(h, assay_test::Contains("1 mismatches &amp; &quot;quotes&quot;"));
  CHECK_THAT(h, assay_test::Contains("Fake GPU"));
  for (const char* cls : {"seq-plot", "heatmap", "hist"}) CHECK_THAT(h, assay_test::Contains(std::string("class=\"") + cls + "\""));
  CHECK_THAT(h, assay_test::Contains("[b=0, t=4, d=1]"));
  CHECK_THAT(h, assay_test::Contains(assay_test::html_escaped(default_tolerance(DType::f32).why)));
  CHECK(h.find("id=\"case-0\"") == std::string::npos);  // Passed: no section
  CHECK(h.find("id=\"case-3\"") != std::string::npos);  // Incorrect: a section
  // Plots for the first 60 failing tensors only (a report of hundreds stays light); the rest keep their text.
  {
    RunReport big = r;
    for (int i = 0; i < 70; ++i) big.cases[3].tensors.push_back(big.cases[3].tensors.back());
    const auto hb = to_html(big);
    size_t n = 0;
    for (size_t p = hb.find("<svg class=\"seq-plot\""); p != std::string::npos; p = hb.find("<svg class=\"seq-plot\"", p + 1)) ++n;
    CHECK(n == 60);
    CHECK_THAT(hb, assay_test::Contains("plots left out: only the first 60 failing tensors"));
  }
  RunReport none;
  CHECK(none.exit_code() == 125);
}

TEST_CASE("assay verify without a usable GPU: NotRun, exit 125, said clearly", "[cpu][L0]") {
  auto d = tmpdir("verify_nogpu");
  auto r = run("verify --list");
  CHECK(r.code == 0);
  auto v = run("verify --json --junit " + (d / "j.xml").string());
  INFO(v.out);
  // CPU-only build: no kernel is registered -> nothing selected (125). CUDA build: NotRun (125).
  CHECK(v.code == 125);
  auto u = run("verify --kernel no_such_kernel");
  CHECK(u.code == 2);
  CHECK_THAT(u.out, assay_test::Contains("matches no registered kernel"));
  auto s = run("verify --shard 3/2");
  CHECK(s.code == 2);
  auto t = run("sanitize --tool leakcheck");
  CHECK(t.code == 2);
}

TEST_CASE("the report opens with a kernel x case matrix, NotSupported pairs collapse by reason (issue 36, item 4)",
          "[cpu][L0]") {
  RunReport r;
  auto add = [&](const std::string& kernel, const std::string& cs, Verdict v, const std::string& reason, double ratio) {
    CaseResult c;
    c.kernel = kernel, c.op = "scaled_add", c.case_name = cs, c.verdict = v, c.reason = reason;
    if (ratio >= 0) {
      TensorReport t;
      t.name = "out", t.max_ratio = ratio, t.verdict = ratio <= 1 ? Verdict::Passed : Verdict::Incorrect;
      c.tensors.push_back(t);
    }
    r.cases.push_back(c);
  };
  add("alpha_kernel", "a_case", Verdict::Passed, "ok", 0.25);
  add("alpha_kernel", "b_case", Verdict::Passed, "ok", 0.5);
  add("alpha_kernel", "z_case", Verdict::NotSupported, "fp32 inputs only", -1);
  add("zeta_kernel", "a_case", Verdict::Passed, "ok", 0.1);
  add("zeta_kernel", "b_case", Verdict::Incorrect, "'out': 3 mismatches", 40);
  add("zeta_kernel", "z_case", Verdict::NotSupported, "fp32 inputs only", -1);
  add("zeta_kernel", "y_case", Verdict::NotSupported, "no varlen", -1);
  const auto h = to_html(r);
  const auto m = h.find("<table id=\"matrix\">"), v = h.find("<table id=\"verdicts\">");
  REQUIRE(m != std::string::npos);
  CHECK(m < v);  // the picture first
  // The failing kernel's row first, the failing case's column first.
  CHECK(h.find("<tr class=\"bad\"><th>zeta_kernel", m) < h.find("<tr class=\"ok\"><th>alpha_kernel", m));
  CHECK(h.find("<span>scaled_add/b_case</span>", m) < h.find("<span>scaled_add/a_case</span>", m));
  CHECK(h.find("<span>scaled_add/z_case</span>") == std::string::npos);  // nobody ran it: only in the list
  CHECK_THAT(h, assay_test::Contains("title=\"zeta_kernel &middot; scaled_add/b_case: Incorrect, worst 40\u00d7 allowed\""));
  CHECK_THAT(h, assay_test::Contains("<details id=\"not-supported\"><summary>3 NotSupported pairs, 2 reasons</summary>"));
  CHECK_THAT(h, assay_test::Contains("<tr><td>2</td><td>fp32 inputs only</td>"));
  // The verdict table lists failures first and no NotSupported rows.
  const auto bad_row = h.find("<tr class=\"incorrect\">", v), pass_row = h.find("<tr class=\"pass\">", v);
  CHECK(bad_row < pass_row);
  CHECK(h.find("<tr class=\"skip\">", v) == std::string::npos);
  // The same summary in the JSON.
  const auto j = to_json(r);
  REQUIRE(j["summary"]["kernels"].size() == 2);
  CHECK(j["summary"]["kernels"][0]["kernel"] == "zeta_kernel");
  CHECK(j["summary"]["kernels"][0]["Incorrect"] == 1);
  CHECK(j["summary"]["kernels"][1]["closest_pass"] == 0.5);
  CHECK(j["summary"]["not_supported_by_reason"][0]["pairs"] == 2);
}
