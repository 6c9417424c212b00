// End-to-end tests of the assay CLI, run as separate processes.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "catch_compat.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/tests/cli_helpers.h"

using namespace assay;
namespace fs = std::filesystem;

using namespace assay_test::cli;

TEST_CASE("gen gives the same input bytes in two separate processes", "[cpu][L0]") {
  auto a = tmpdir("gen_a"), b = tmpdir("gen_b");
  auto ra = run("gen --op scaled_add -q --out " + a.string());
  auto rb = run("gen --op scaled_add -q --out " + b.string());
  REQUIRE(ra.code == 0);
  REQUIRE(rb.code == 0);
  const auto ma = slurp(a / "MANIFEST");
  REQUIRE(ma.find("scaled_add/int_exact.h5 L0 x=") != std::string::npos);
  REQUIRE(ma == slurp(b / "MANIFEST"));
  // And the same bits as the committed goldens (generated on another machine / earlier).
  const auto committed = slurp(fs::path(ASSAY_SOURCE_DIR) / "golden" / "MANIFEST");
  std::istringstream ls(ma);
  std::string line;
  int n = 0;
  while (std::getline(ls, line))
    if (!line.empty() && line[0] != '#') {
      CHECK(committed.find(line) != std::string::npos);
      ++n;
    }
  REQUIRE(n == 3);
}

TEST_CASE("compare passes a correct candidate and rejects never-pass ones under absurd tolerances", "[cpu][L0]") {
  const auto g = read_golden(kGolden);
  auto d = tmpdir("compare");
  write_candidate(d / "good.h5", g, [](double v, size_t) { return v; });
  auto r = run("compare " + kGolden + " " + (d / "good.h5").string());
  INFO(r.out);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, assay_test::Contains("Passed"));

  write_candidate(d / "nan.h5", g, [](double v, size_t i) { return i == 100 ? std::nan("") : v; });
  write_candidate(d / "zero.h5", g, [](double, size_t) { return 0.0; });
  write_candidate(d / "const.h5", g, [](double, size_t) { return 0.25; });
  write_candidate(d / "off.h5", g, [](double v, size_t i) { return i == 7 ? v + 1.0 : v; });
  for (const char* bad : {"nan.h5", "zero.h5", "const.h5"}) {
    auto rb = run("compare --atol 1e30 --rtol 1e30 " + kGolden + " " + (d / bad).string());
    INFO(bad << "\n" << rb.out);
    CHECK(rb.code == 1);
    CHECK_THAT(rb.out, assay_test::Contains("NEVER-PASS"));
  }
  auto ro = run("compare " + kGolden + " " + (d / "off.h5").string());
  INFO(ro.out);
  CHECK(ro.code == 1);
  CHECK_THAT(ro.out, assay_test::Contains("first=[b=0, t=0, d=7]"));
  auto js = run("compare --json " + kGolden + " " + (d / "off.h5").string());
  CHECK_THAT(js.out, assay_test::Contains("\"verdict\": \"Incorrect\""));
}

TEST_CASE("a golden copy with one flipped input byte is Stale", "[cpu][L0]") {
  auto d = tmpdir("stale");
  const auto copy = d / "copy.h5";
  fs::copy_file(kGolden, copy);
  {
    auto f = h5::File::open_rw(copy.string());
    auto codes = f.read_u64("/inputs/x");
    std::vector<uint16_t> v(codes.begin(), codes.end());
    v[10] ^= 0x0100;  // one bit of one byte
    f.overwrite("/inputs/x", h5::Elem::u16, v.data());
  }
  const auto g = read_golden(kGolden);
  write_candidate(d / "good.h5", g, [](double v, size_t) { return v; });
  auto r = run("compare " + copy.string() + " " + (d / "good.h5").string());
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, assay_test::Contains("Stale"));
  CHECK_THAT(r.out, assay_test::Contains("input 'x'"));
  // The untouched golden with the same candidate passes.
  CHECK(run("compare " + kGolden + " " + (d / "good.h5").string()).code == 0);
}

TEST_CASE("a fixture edit makes its golden Stale", "[cpu][L0]") {
  auto d = tmpdir("fixture_edit");
  auto text = slurp(fs::path(ASSAY_SOURCE_DIR) / "fixtures" / "scaled_add.toml");
  const auto pos = text.find("seed = 7");
  REQUIRE(pos != std::string::npos);
  text.replace(pos, 8, "seed = 8");
  std::ofstream(d / "scaled_add.toml") << text;
  const auto g = read_golden(kGolden);
  write_candidate(d / "good.h5", g, [](double v, size_t) { return v; });
  auto r = run("compare --fixtures " + d.string() + " " + kGolden + " " + (d / "good.h5").string());
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, assay_test::Contains("Stale"));
}

TEST_CASE("compare --atol/--rtol keeps the entry's bound: a golden with +inf bounds passes its own expected", "[cpu][L0]") {
  // golden/optim/adamw_bf16_fused.h5 carries +inf bounds where the policy compares exactly; --atol 0
  // --rtol 0 used to make the allowance 0 * inf = NaN, so the golden's own /expected failed with max_abs 0.
  const std::string gp = std::string(ASSAY_SOURCE_DIR) + "/golden/optim/adamw_bf16_fused.h5";
  const auto g = read_golden(gp);
  auto d = tmpdir("compare_inf_bound");
  {
    auto h = h5::File::create((d / "self.h5").string());
    h.create_group("/outputs");
    for (const auto& o : g.outputs)
      h.write("/outputs/" + o.expected.name, h5::Elem::f64, o.expected.shape, o.expected.data.data());
  }
  auto r = run("compare --atol 0 --rtol 0 " + gp + " " + (d / "self.h5").string());
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, assay_test::Contains("--atol/--rtol"));
}

TEST_CASE("compare judges under the declared precision profile and refuses unknown ones", "[cpu][L0]") {
  const auto g = read_golden(kGolden);
  auto d = tmpdir("compare_profile");
  write_candidate(d / "good.h5", g, [](double v, size_t) { return v; });
  auto r = run("compare " + kGolden + " " + (d / "good.h5").string());
  CHECK(r.code == 0);
  CHECK_THAT(r.out, assay_test::Contains("(profile strict)"));
  auto u = run("compare --profile tf99 " + kGolden + " " + (d / "good.h5").string());
  INFO(u.out);
  CHECK(u.code == 2);
  CHECK(lines(u.out) == 1);
  CHECK_THAT(u.out, assay_test::Contains("precision profile 'tf99' is not one of op scaled_add's profiles (strict)"));
  {
    auto h = h5::File::open_rw((d / "good.h5").string());
    h.set_attr("/", "precision_profile", std::string("bf16-states"));
  }
  auto a = run("compare " + kGolden + " " + (d / "good.h5").string());
  INFO(a.out);
  CHECK(a.code == 2);
  CHECK_THAT(a.out, assay_test::Contains("good.h5: attribute precision_profile"));
  auto both = run("compare --profile strict " + kGolden + " " + (d / "good.h5").string());
  CHECK(both.code == 2);
  CHECK_THAT(both.out, assay_test::Contains("say one"));
}

namespace {
// The first committed golden under golden/<op>/ that has an output satisfying `want`.
std::string golden_with(const std::string& op, bool (*want)(const Output&)) {
  std::vector<fs::path> files;
  for (const auto& de : fs::directory_iterator(fs::path(ASSAY_SOURCE_DIR) / "golden" / op)) files.push_back(de.path());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    const auto g = read_golden(p.string());
    for (const auto& o : g.outputs)
      if (want(o)) return p.string();
  }
  FAIL("no golden under golden/" << op << " has the wanted output");
  return {};
}
}  // namespace

TEST_CASE("a tampered golden is Stale: edited /expected, /bounds, /rounded, dtype attribute, seed, content hash", "[cpu][L0]") {
  auto d = tmpdir("tamper");
  struct Edit {
    std::string what, golden;
    void (*edit)(h5::File&, const Golden&);
    std::string must;  // words of the Stale reason
  };
  const auto bounded = golden_with("attention", [](const Output& o) { return o.bound.has_value(); });
  const auto rounded = golden_with("quant", [](const Output& o) { return o.rounded.has_value(); });
  const std::vector<Edit> edits = {
      {"expected edited to match a wrong candidate", kGolden,
       [](h5::File& f, const Golden&) {
         auto v = f.read_f64("/expected/out");
         v[7] += 1.0;
         f.overwrite("/expected/out", h5::Elem::f64, v.data());
       },
       "/expected/out"},
      {"expected made constant", kGolden,
       [](h5::File& f, const Golden&) {
         auto v = f.read_f64("/expected/out");
         std::fill(v.begin(), v.end(), 0.25);
         f.overwrite("/expected/out", h5::Elem::f64, v.data());
       },
       "/expected/out"},
      {"output dtype attribute changed", kGolden,
       [](h5::File& f, const Golden& g) {
         f.set_attr("/expected/out", "dtype", std::string(g.output("out")->expected.dtype == DType::bf16 ? "fp32" : "bf16"));
       },
       "/expected/out"},
      {"bounds set to +inf", bounded,
       [](h5::File& f, const Golden& g) {
         for (const auto& o : g.outputs)
           if (o.bound) {
             std::vector<double> v(o.bound->size(), HUGE_VAL);
             f.overwrite("/bounds/" + o.expected.name, h5::Elem::f64, v.data());
             return;
           }
       },
       "/bounds/"},
      {"rounded codes changed", rounded,
       [](h5::File& f, const Golden& g) {
         for (const auto& o : g.outputs)
           if (o.rounded) {
             auto v = *o.rounded;
             v[0] ^= 1;
             f.overwrite("/rounded/" + o.expected.name, h5::Elem::u64, v.data());
             return;
           }
       },
       "/rounded/"},
      {"seed attribute changed", kGolden, [](h5::File& f, const Golden&) { f.set_attr("/", "seed", std::string("8")); },
       "root attributes"},
      {"content hash removed", kGolden, [](h5::File& f, const Golden&) { f.set_attr("/", "content_fnv1a64", std::string("")); },
       "content_fnv1a64"},
  };
  int i = 0;
  for (const auto& e : edits) {
    INFO(e.what);
    const auto copy = d / ("copy" + std::to_string(i++) + ".h5");
    fs::copy_file(e.golden, copy);
    const auto g = read_golden(e.golden);
    write_candidate(d / "cand.h5", g, [](double v, size_t) { return v; });
    REQUIRE(run("compare --no-fixture-check " + e.golden + " " + (d / "cand.h5").string()).code == 0);
    {
      auto f = h5::File::open_rw(copy.string());
      e.edit(f, g);
    }
    auto r = run("compare --no-fixture-check " + copy.string() + " " + (d / "cand.h5").string());
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains("Stale"));
    CHECK_THAT(r.out, assay_test::Contains(e.must));
  }
}

TEST_CASE("a golden's seed must be a number and agree with its case text", "[cpu][L0]") {
  auto d = tmpdir("seed");
  const auto copy = d / "nan_seed.h5";
  fs::copy_file(kGolden, copy);
  h5::File::open_rw(copy.string()).set_attr("/", "seed", std::string("seven"));
  auto r = run("inspect " + copy.string());
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(lines(r.out) == 1);
  CHECK_THAT(r.out, assay_test::Contains("attribute 'seed': 'seven' is not a decimal uint64"));
  // A golden written with consistent hashes whose seed disagrees with its case text.
  auto g = read_golden(kGolden);
  g.prov.seed += 1;
  write_golden((d / "other_seed.h5").string(), g);
  write_candidate(d / "cand.h5", g, [](double v, size_t) { return v; });
  auto rs = run("compare --no-fixture-check " + (d / "other_seed.h5").string() + " " + (d / "cand.h5").string());
  INFO(rs.out);
  CHECK(rs.code == 2);
  CHECK_THAT(rs.out, assay_test::Contains("but case_toml says seed = "));
}

TEST_CASE("a candidate may store 16-bit codes as signed integers (tensor.view(torch.int16))", "[cpu][L0]") {
  const auto path = golden_with("attention", [](const Output& o) { return o.expected.dtype == DType::bf16; });
  const auto g = read_golden(path);
  const Output* bf = nullptr;
  for (const auto& o : g.outputs)
    if (o.expected.dtype == DType::bf16 && !bf) bf = &o;
  const auto& e = bf->expected;
  auto d = tmpdir("int16");
  std::vector<int16_t> v(e.data.size());
  bool negative = false;
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<int16_t>(static_cast<uint16_t>(encode(e.dtype, round_to(e.dtype, e.data[i]))));
    negative |= v[i] < 0;
  }
  REQUIRE(negative);  // some codes have the sign bit set: the case that used to be refused
  {
    auto h = h5::File::create((d / "i16.h5").string());
    h.create_group("/outputs");
    h.write("/outputs/" + e.name, h5::Elem::i16, e.shape, v.data());
    h.set_attr("/outputs/" + e.name, "dtype", std::string(name(e.dtype)));
  }
  auto r = run("compare --output " + e.name + " " + path + " " + (d / "i16.h5").string());
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, assay_test::Contains("Passed"));
}

TEST_CASE("gen removes the temp files of killed runs and keeps a live run's", "[cpu][L0]") {
  auto d = tmpdir("stale_tmp");
  // A pid that has certainly exited: a child we waited for.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  fs::create_directories(d / "scaled_add");
  const auto dead = d / "scaled_add" / ("int_exact.h5.tmp." + std::to_string(child));
  const auto live = d / "scaled_add" / ("int_exact.h5.tmp." + std::to_string(getpid()));
  std::ofstream(dead) << "half a golden";
  std::ofstream(live) << "another run's golden in progress";
  auto r = run("gen --op scaled_add -j 1 --out " + d.string());
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
  CHECK_THAT(r.out, assay_test::Contains("removed " + dead.string()));

  // A shard removes only its own cases' temp files: another shard's writer may be alive on another
  // machine sharing the directory, where this machine's pid table says nothing.
  std::string owner;
  for (int k = 1; k <= 3 && owner.empty(); ++k)
    if (run("gen --op scaled_add --list --shard " + std::to_string(k) + "/3").out.find("scaled_add/int_exact") !=
        std::string::npos)
      owner = std::to_string(k);
  REQUIRE(!owner.empty());
  const std::string other = owner == "1" ? "2" : "1";
  std::ofstream(dead) << "half a golden";
  REQUIRE(run("gen --op scaled_add -j 1 --shard " + other + "/3 --out " + d.string()).code == 0);
  CHECK(fs::exists(dead));
  REQUIRE(run("gen --op scaled_add -j 1 --shard " + owner + "/3 --out " + d.string()).code == 0);
  CHECK_FALSE(fs::exists(dead));
}

TEST_CASE("fixtures are found beside the goldens being judged, never from the working directory (issue 36, item 1)",
          "[cpu][L0]") {
  // A copy of a golden with a fixture of its own beside it (data/golden/<op>/, data/fixtures/), whose
  // tolerance is near zero: judged from an unrelated directory, the copy's fixture is the one used
  // (the correct candidate is rejected by it); --fixtures still overrides. Before, the source tree's
  // fixture judged every golden (or ./fixtures when the binary had moved) and this passed.
  auto d = tmpdir("beside");
  const fs::path data = d / "data";
  fs::create_directories(data / "golden" / "scaled_add");
  fs::create_directories(data / "fixtures");
  const fs::path golden = data / "golden" / "scaled_add" / "normal_odd_shape.h5";
  fs::copy_file(kGolden, golden);
  auto text = slurp(fs::path(ASSAY_SOURCE_DIR) / "fixtures" / "scaled_add.toml");
  // The golden's output is fp32 (judged by the fp32 default): an entry of the copy's own, 0.01 ulp.
  text.insert(text.find("[[case]]"), "[[tolerance]]\noutput = \"out\"\ndtype = \"fp32\"\nrtol = 6e-10\nwhy = \"test\"\n\n");
  std::ofstream(data / "fixtures" / "scaled_add.toml") << text;
  const auto g = read_golden(kGolden);
  write_candidate(d / "good.h5", g, [](double v, size_t) { return v; });
  const std::string exe = ASSAY_EXE;
  auto r = assay_test::run_shell("cd / && env -u ASSAY_FIXTURES " + exe + " compare " + golden.string() + " " +
                                 (d / "good.h5").string() + " --json-file " + (d / "r.json").string());
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK_THAT(slurp(d / "r.json"), assay_test::Contains("\"fixtures_dir\": \"" + (data / "fixtures").string() + "\""));
  fs::create_directories(d / "cands");
  fs::copy_file(d / "good.h5", d / "cands" / "normal_odd_shape.h5");
  auto rd = assay_test::run_shell("cd / && env -u ASSAY_FIXTURES " + exe + " compare --golden-dir " + (data / "golden" / "scaled_add").string() +
                                  " --candidate-dir " + d.string() + "/cands --json-file " + (d / "rd.json").string());
  INFO("golden-dir: " << rd.out);
  CHECK(rd.code == 1);
  CHECK_THAT(slurp(d / "rd.json"), assay_test::Contains("\"fixtures_dir\": \"" + (data / "fixtures").string() + "\""));
  auto ro = assay_test::run_shell("cd / && " + exe + " compare --fixtures " + std::string(ASSAY_SOURCE_DIR) + "/fixtures " +
                                  golden.string() + " " + (d / "good.h5").string());
  INFO(ro.out);
  CHECK(ro.code == 0);
  // Fixtures without this op's file: one line naming it, exit 2, not a Stale case.
  fs::create_directories(d / "nofx");
  std::ofstream(d / "nofx" / "other.toml") << "op = \"other\"\n";
  for (const std::string& mode : {golden.string() + " " + (d / "good.h5").string(),
                                  "--golden-dir " + (data / "golden" / "scaled_add").string() + " --candidate-dir " + (d / "cands").string()}) {
    auto rn = assay_test::run_shell("cd / && " + exe + " compare --fixtures " + (d / "nofx").string() + " " + mode);
    INFO(rn.out);
    CHECK(rn.code == 2);
    CHECK_THAT(rn.out, assay_test::Contains("no fixture for op 'scaled_add'"));
    CHECK_THAT(rn.out, !assay_test::Contains("Stale"));
  }
  // gen --check of the copy from an unrelated directory uses the fixture beside it too (its MANIFEST
  // line copied with it).
  {
    std::istringstream manifest(slurp(fs::path(ASSAY_SOURCE_DIR) / "golden" / "MANIFEST"));
    std::ofstream m(data / "golden" / "MANIFEST");
    for (std::string line; std::getline(manifest, line);)
      if (line.rfind("scaled_add/normal_odd_shape.h5 ", 0) == 0) m << line << "\n";
  }
  auto rg = assay_test::run_shell("cd / && env -u ASSAY_FIXTURES " + exe + " gen --check -q --op scaled_add --case normal_odd_shape --out " +
                                  (data / "golden").string());
  INFO(rg.out);
  CHECK(rg.code == 0);
}

TEST_CASE("gen --max-memory: a case over the memory budget runs alone and says so, and the goldens do not change", "[cpu][L0]") {
  auto whole = tmpdir("gen_mem_whole"), tight = tmpdir("gen_mem_tight"), env = tmpdir("gen_mem_env");
  REQUIRE(run("gen --op scaled_add --op quant -q -j 2 --out " + whole.string()).code == 0);
  // 32 MB: below every case's estimate (the 64 MB base alone), above every tensor of these cases.
  const auto r = run("gen --op scaled_add --op quant -j 2 --max-memory 32M --out " + tight.string());
  INFO(r.out);
  REQUIRE(r.code == 0);
  int alone = 0;
  std::istringstream ls(r.out);
  for (std::string line; std::getline(ls, line);)
    if (line.find("runs alone") != std::string::npos) {
      ++alone;
      // One line: the case, its estimate and the budget.
      CHECK_THAT(line, assay_test::Contains("more than the memory budget of 0.0336 GB"));
      CHECK_THAT(line, assay_test::Contains("needs about 0.0"));
    }
  CHECK_THAT(r.out, assay_test::Contains("gen: scaled_add/int_exact needs about"));
  const auto listing = run("gen --op scaled_add --op quant --list");
  CHECK(alone == assay_test::lines(listing.out));  // every case, once
  CHECK_THAT(r.out, assay_test::Contains("1 at once at most, within a budget of 0.0336 GB (--max-memory)"));
  CHECK(slurp(tight / "MANIFEST") == slurp(whole / "MANIFEST"));
  // $ASSAY_MAX_MEMORY is the same budget; without either, 80% of MemAvailable.
  const auto e = assay_test::run_assay("gen --op scaled_add -j 2 --out " + env.string(), "env ASSAY_MAX_MEMORY=32M ");
  CHECK(e.code == 0);
  CHECK_THAT(e.out, assay_test::Contains("runs alone"));
  const auto d = run("gen --op scaled_add -j 2 --out " + env.string());
  CHECK(d.code == 0);
  CHECK(d.out.find("runs alone") == std::string::npos);
  CHECK_THAT(d.out, assay_test::Contains("% of MemAvailable)"));
  // --list gives each case's estimate.
  CHECK_THAT(run("gen --op scaled_add --list").out, assay_test::Contains("scaled_add/int_exact  L0  0.0"));
}

TEST_CASE("gen --shard k/n: the shards' union is the whole selection, once each, and their goldens are the unsharded run's",
          "[cpu][L0]") {
  auto case_set = [](const std::string& listing) {
    std::multiset<std::string> s;
    std::istringstream ls(listing);
    std::string line;
    while (std::getline(ls, line))
      if (!line.empty()) s.insert(line);
    return s;
  };
  const std::string sel = "gen --op attention --op quant --op scaled_add --list";
  const auto all = run(sel);
  REQUIRE(all.code == 0);
  const auto want = case_set(all.out);
  REQUIRE(want.size() > 40);
  std::multiset<std::string> got;
  for (int k = 1; k <= 3; ++k) {
    const auto r = run(sel + " --shard " + std::to_string(k) + "/3");
    REQUIRE(r.code == 0);
    const auto part = case_set(r.out);
    CHECK(!part.empty());
    got.insert(part.begin(), part.end());
  }
  CHECK(got == want);  // a multiset: a case in two shards would count twice

  // Two shards into one directory (one thread each) write what one unsharded run on two threads
  // writes: the same MANIFEST, so the same bits, whatever the threads per case.
  auto whole = tmpdir("gen_whole"), parts = tmpdir("gen_parts");
  REQUIRE(run("gen --op scaled_add --op quant -q -j 2 --out " + whole.string()).code == 0);
  REQUIRE(run("gen --op scaled_add --op quant -q -j 1 --shard 2/2 --out " + parts.string()).code == 0);
  REQUIRE(run("gen --op scaled_add --op quant -q -j 1 --shard 1/2 --out " + parts.string()).code == 0);
  CHECK(slurp(parts / "MANIFEST") == slurp(whole / "MANIFEST"));
  CHECK(run("gen --check --op scaled_add --op quant -q --shard 1/2 --out " + parts.string()).code == 0);

  const auto bad = run("gen --op scaled_add --shard 3/2 --out " + parts.string());
  CHECK(bad.code == 2);
  CHECK(lines(bad.out) == 1);
  CHECK_THAT(bad.out, assay_test::Contains("--shard '3/2': need 1 <= k <= n"));
}
