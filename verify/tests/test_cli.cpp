// End-to-end tests of the assay CLI, run as separate processes.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "catch_compat.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/tests/cli_helpers.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {
using assay_test::Run;
using assay_test::slurp;
Run run(const std::string& args) { return assay_test::run_assay(args); }
int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}
fs::path tmpdir(const std::string& name) { return assay_test::fresh_dir("assay_test_cli", name); }
// A candidate holding the golden's outputs (optionally transformed), as float32 like torch would write.
void write_candidate(const fs::path& path, const Golden& g, double (*f)(double, size_t)) {
  auto h = h5::File::create(path.string());
  h.create_group("/outputs");
  for (const auto& o : g.outputs) {
    std::vector<float> v(o.expected.data.size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(f(round_to(o.expected.dtype, o.expected.data[i]), i));
    h.write("/outputs/" + o.expected.name, h5::Elem::f32, o.expected.shape, v.data());
  }
}
const std::string kGolden = std::string(ASSAY_SOURCE_DIR) + "/golden/scaled_add/normal_odd_shape.h5";
}  // namespace

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

TEST_CASE("bad input: one line naming the file and field, exit 2", "[cpu][L0]") {
  auto d = tmpdir("bad");
  const auto g = read_golden(kGolden);
  write_candidate(d / "good.h5", g, [](double v, size_t) { return v; });
  auto one_line_exit2 = [](const Run& r, const std::string& must) {
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, assay_test::Contains(must));
  };
  // Not HDF5, truncated.
  std::ofstream(d / "text.h5") << "hello";
  one_line_exit2(run("compare " + (d / "text.h5").string() + " " + (d / "good.h5").string()), "text.h5: not an HDF5 file");
  const auto bytes = slurp(kGolden);
  std::ofstream(d / "trunc.h5", std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  one_line_exit2(run("compare " + (d / "trunc.h5").string() + " " + (d / "good.h5").string()), "trunc.h5");
  one_line_exit2(run("inspect " + (d / "trunc.h5").string()), "trunc.h5");
  // Missing dataset, wrong shape, wrong dtype in the candidate.
  {
    auto h = h5::File::create((d / "empty.h5").string());
    h.create_group("/outputs");
  }
  one_line_exit2(run("compare " + kGolden + " " + (d / "empty.h5").string()), "/outputs/out: missing dataset");
  {
    auto h = h5::File::create((d / "shape.h5").string());
    h.create_group("/outputs");
    std::vector<float> v(10);
    h.write("/outputs/out", h5::Elem::f32, {10}, v.data());
  }
  one_line_exit2(run("compare " + kGolden + " " + (d / "shape.h5").string()), "wrong shape");
  {
    auto h = h5::File::create((d / "dtype.h5").string());
    h.create_group("/outputs");
    const auto& e = g.output("out")->expected;
    std::vector<uint8_t> v(e.data.size());
    h.write("/outputs/out", h5::Elem::u8, e.shape, v.data());
    h.set_attr("/outputs/out", "dtype", std::string("fp8e4m3"));
  }
  one_line_exit2(run("compare " + kGolden + " " + (d / "dtype.h5").string()), "wrong dtype");
  // Unknown op, malformed TOML, usage.
  one_line_exit2(run("gen --op no_such_op --out " + d.string()), "unknown op 'no_such_op'");
  std::ofstream(d / "scaled_add.toml") << "op = \"scaled_add\"\n[[case]\nname = \"x\"\n";
  one_line_exit2(run("gen --op scaled_add --fixtures " + d.string() + " --out " + d.string()), "scaled_add.toml:2");
  std::ofstream(d / "scaled_add.toml") << "op = \"scaled_add\"\n[[case]]\nname = \"x\"\nlevel = \"L0\"\nB = 1\nT = 2\nD = \"wide\"\n";
  auto rf = run("gen --op scaled_add --fixtures " + d.string() + " --out " + d.string());
  CHECK(rf.code == 2);
  CHECK_THAT(rf.out, assay_test::Contains("case 'x': field 'D': expected an integer"));
  CHECK(run("frobnicate").code == 2);
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

TEST_CASE("hostile input: FIFOs, overlapping specials, absurd -j, an unwritable --out", "[cpu][L0]") {
  // Each of these used to hang or abort; the commands run under `timeout` so a regression fails
  // the test (exit 124) instead of hanging it.
  auto d = tmpdir("hostile");
  auto one_line_exit2 = [](const Run& r, const std::string& must) {
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, assay_test::Contains(must));
  };
  const auto g = read_golden(kGolden);
  write_candidate(d / "good.h5", g, [](double v, size_t) { return v; });
  // A FIFO as golden or candidate: HDF5's signature check blocked on open() forever.
  REQUIRE(::mkfifo((d / "pipe.h5").c_str(), 0600) == 0);
  one_line_exit2(assay_test::run_assay("inspect " + (d / "pipe.h5").string(), "timeout 20 "), "pipe.h5: not a regular file");
  one_line_exit2(assay_test::run_assay("compare " + kGolden + " " + (d / "pipe.h5").string(), "timeout 20 "),
                 "pipe.h5: not a regular file");
  one_line_exit2(assay_test::run_assay("compare " + (d / "pipe.h5").string() + " " + (d / "good.h5").string(), "timeout 20 "),
                 "pipe.h5: not a regular file");
  // specials whose counts add up to more than the tensor's elements: gen drew positions forever.
  fs::create_directories(d / "fx");
  std::ofstream(d / "fx" / "scaled_add.toml")
      << "op = \"scaled_add\"\n[[case]]\nname = \"over\"\nlevel = \"L0\"\nB = 1\nT = 2\nD = 2\n"
         "dist.x = { kind = \"normal\", specials = [{ value = \"nan\", count = 3 }, { value = \"inf\", count = 2 }] }\n";
  {
    auto r = assay_test::run_assay("gen --fixtures " + (d / "fx").string() + " --op scaled_add -q --out " + (d / "out").string(),
                                   "timeout 20 ");
    INFO(r.out);
    CHECK(r.code == 2);  // gen's summary table follows the one error line
    CHECK_THAT(r.out, assay_test::Contains("field 'dist.x.specials': the counts add up to more than the 4 elements"));
  }
  // -j out of range: segfault (100000), silently accepted (-5).
  for (const char* j : {"100000", "-5", "0"}) {
    auto r = run(std::string("gen --op scaled_add --check -q -j ") + j);
    INFO(j << ": " << r.out);
    CHECK(r.code == 2);
  }
  // --out under a regular file: filesystem_error thrown inside an OpenMP critical section aborted.
  std::ofstream(d / "afile") << "x";
  auto w = assay_test::run_assay("gen --op scaled_add -q --out " + (d / "afile" / "sub").string(), "timeout 60 ");
  INFO(w.out);
  CHECK(w.code == 2);
  CHECK_THAT(w.out, assay_test::Contains("afile"));
  // A directory where a golden goes: the write fails inside the OpenMP region; reported, exit 2.
  fs::create_directories(d / "out2" / "scaled_add" / "int_exact.h5");
  auto x = assay_test::run_assay("gen --op scaled_add -q --out " + (d / "out2").string(), "timeout 60 ");
  INFO(x.out);
  CHECK(x.code == 2);
  CHECK_THAT(x.out, assay_test::Contains("int_exact.h5"));
  CHECK_THAT(x.out, !assay_test::Contains("terminate called"));
}

TEST_CASE("hostile input: overflowing shapes, size bombs, NaN or negative tolerances and timeouts", "[cpu][L0]") {
  auto d = tmpdir("hostile2");
  auto exit2 = [](const Run& r, const std::string& must) {
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains(must));
  };
  // B = T = 2^32: the element count wrapped to 0 and gen wrote a golden with declared dims, no data.
  fs::create_directories(d / "fx");
  std::ofstream(d / "fx" / "scaled_add.toml")
      << "op = \"scaled_add\"\n[[case]]\nname = \"wrap\"\nlevel = \"L0\"\nB = 4294967296\nT = 4294967296\nD = 1\n"
         "[[case]]\nname = \"huge\"\nlevel = \"L0\"\nB = 1\nT = 1000000000000\nD = 1\n";
  const std::string gen = "gen --fixtures " + (d / "fx").string() + " --op scaled_add -q -j 1 --out " + (d / "out").string();
  exit2(assay_test::run_assay(gen + " --case wrap", "timeout 60 "), "the element count overflows 64 bits");
  exit2(assay_test::run_assay(gen + " --case huge", "timeout 60 "), "above the memory limit");
  CHECK_FALSE(fs::exists(d / "out" / "scaled_add" / "wrap.h5"));
  // A dataset that declares more than the memory limit is refused by name before it is read.
  exit2(assay_test::run_assay("inspect " + kGolden, "ASSAY_MAX_MEMORY=4096 "), "above the memory limit");
  {
    // Every dataset fits under the limit, all of them together do not: refused before loading.
    const auto g0 = read_golden(kGolden);
    int64_t largest = 0, total = 0;
    for (const auto& t : g0.inputs) largest = std::max(largest, numel(t.shape)), total += numel(t.shape);
    for (const auto& o : g0.outputs) largest = std::max(largest, numel(o.expected.shape)), total += numel(o.expected.shape);
    REQUIRE(total > 2 * largest);
    const auto limit = std::to_string(16 * 2 * largest);
    exit2(assay_test::run_assay("--max-memory " + limit + " inspect " + kGolden), "its datasets together");
  }
  exit2(assay_test::run_assay("--max-memory 4096 inspect " + kGolden), "above the memory limit");
  exit2(assay_test::run_assay("inspect --max-memory 4K " + kGolden), "above the memory limit");
  CHECK(assay_test::run_assay("inspect " + kGolden).code == 0);
  // Tolerances and timeouts: NaN, negative and infinite values are usage errors, not silently 0.
  const auto g = read_golden(kGolden);
  write_candidate(d / "good.h5", g, [](double v, size_t) { return v; });
  for (const char* bad : {"--atol -1", "--atol nan", "--rtol inf"}) {
    auto r = run(std::string("compare ") + bad + " " + kGolden + " " + (d / "good.h5").string());
    INFO(bad << ": " << r.out);
    CHECK(r.code == 2);
  }
  CHECK(run("verify --timeout -1").code == 2);
  CHECK(run("verify --timeout nan").code == 2);
}

TEST_CASE("fixtures are parsed, not pattern-matched: [[case]] inside a string, non-table cases, negative seeds", "[cpu][L0]") {
  auto d = tmpdir("parsed");
  fs::create_directories(d / "fx");
  auto gen = [&](const std::string& toml) {
    std::ofstream(d / "fx" / "scaled_add.toml") << toml;
    fs::remove_all(d / "out");
    return assay_test::run_assay("gen --fixtures " + (d / "fx").string() + " --op scaled_add -q -j 1 --out " + (d / "out").string(),
                                 "timeout 60 ");
  };
  // Valid TOML: a multi-line description holding a [[case]] line. It used to be counted as a header.
  auto ok = gen("op = \"scaled_add\"\n[[case]]\nname = \"a\"\nlevel = \"L0\"\ndescription = \"\"\"\n[[case]]\n\"\"\"\nB = 1\nT = 2\nD = 2\n");
  INFO(ok.out);
  CHECK(ok.code == 0);
  CHECK(fs::exists(d / "out" / "scaled_add" / "a.h5"));
  if (fs::exists(d / "out" / "scaled_add" / "a.h5")) {
    const auto g = read_golden((d / "out" / "scaled_add" / "a.h5").string());
    CHECK_THAT(g.prov.case_toml, assay_test::Contains("description = \"\"\"\n[[case]]\n\"\"\""));
  }
  // A header-looking line in a string plus a `case` array of numbers: this segfaulted.
  auto seg = gen("op = \"scaled_add\"\nnote = \"\"\"\n[[case]]\n\"\"\"\ncase = [1]\n");
  INFO(seg.out);
  CHECK(seg.code == 2);
  CHECK_THAT(seg.out, assay_test::Contains("field 'case': element #1 is not a table"));
  // A negative seed was stored as 2^64 - 1.
  auto neg = gen("op = \"scaled_add\"\n[[case]]\nname = \"a\"\nlevel = \"L0\"\nseed = -1\nB = 1\nT = 2\nD = 2\n");
  INFO(neg.out);
  CHECK(neg.code == 2);
  CHECK_THAT(neg.out, assay_test::Contains("field 'seed'"));
}

TEST_CASE("usage errors are named: a missing --fixtures, an empty --out, an unmatched --case, an unknown subcommand", "[cpu][L0]") {
  auto exit2 = [](const Run& r, const std::string& must) {
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, assay_test::Contains(must));
  };
  // It used to blame the golden ("Stale: fixture ... no longer exists").
  exit2(run("compare --fixtures /nonexistent " + kGolden + " " + kGolden), "--fixtures: Directory does not exist");
  // It used to write into the committed golden/ (the default) without a word.
  exit2(run("gen --op scaled_add --check -q --out \"\""), "--out: must not be empty");
  // It used to exit 0 having done nothing.
  exit2(run("gen --case 'zzz*' -q"), "no L0 case matches --case 'zzz*'");
  exit2(run("frobnicate"), "unknown subcommand 'frobnicate' (gen, inspect, compare, verify, sanitize, calibrate, bisect)");
}

TEST_CASE("a golden whose file cannot be completed is never left under its name (disk full)", "[cpu][L0]") {
  // The file-size limit (ulimit -f, SIGXFSZ ignored) makes HDF5's writes fail with EFBIG as a full
  // disk would. gen used to ignore the failed close, rename the truncated file into place, list it
  // in the MANIFEST and then crash in HDF5's exit-time cleanup (SIGSEGV).
  auto d = tmpdir("diskfull");
  // 8 KiB: below the smallest scaled_add golden (15 KB), so every case fails.
  const std::string limited = "bash -c 'trap \"\" XFSZ; ulimit -f 8; exec \"$0\" \"$@\"' ";
  auto r = assay_test::run_assay("gen --op scaled_add -q -j 1 --out " + (d / "out").string(), "timeout 120 " + limited);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, assay_test::Contains("cannot flush or close the file"));
  CHECK_THAT(r.out, !assay_test::Contains("HDF5-DIAG"));
  size_t left = 0;
  if (fs::exists(d / "out" / "scaled_add"))
    for (const auto& e : fs::directory_iterator(d / "out" / "scaled_add")) (void)e, ++left;
  CHECK(left == 0);  // neither a truncated golden nor a temp file
  CHECK_FALSE(fs::exists(d / "out" / "MANIFEST"));
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

TEST_CASE("fixture fields: NaN, Inf and out-of-range values are refused by name; a fixture path must be a file", "[cpu][L0]") {
  auto d = tmpdir("fields");
  fs::create_directories(d / "fx");
  auto gen = [&](const std::string& field) {
    std::ofstream(d / "fx" / "scaled_add.toml")
        << "op = \"scaled_add\"\n[[case]]\nname = \"c\"\nlevel = \"L0\"\nseed = 1\nB = 1\nT = 4\nD = 4\n" << field << "\n";
    fs::remove_all(d / "out");
    return assay_test::run_assay("gen --fixtures " + (d / "fx").string() + " --op scaled_add -q -j 1 --out " + (d / "out").string(),
                                 "timeout 60 ");
  };
  struct Bad {
    std::string field, must;
  };
  for (const auto& b : std::vector<Bad>{
           {"alpha = nan", "field 'alpha': nan is not a finite number"},
           {"alpha = inf", "field 'alpha': inf is not a finite number"},
           {"beta = -inf", "field 'beta': -inf is not a finite number"},
           // Finite, but the math leaves the fp64 range: refused as this case's input, not an internal error.
           {"alpha = 1e308\ndist.x = { kind = \"const\", value = 4 }", "take the math out of the fp64 range"},
           {"dist.x = { kind = \"int\", lo = -1e308, hi = 1e308 }", "field 'dist.x': int bounds must lie within +-2^53"},
           {"dist.x = { kind = \"normal\", std = inf }", "field 'dist.x.std': inf is not a finite number"},
           {"dist.y = { kind = \"uniform\", lo = nan, hi = 1 }", "field 'dist.y.lo': nan is not a finite number"},
       }) {
    auto r = gen(b.field);
    INFO(b.field << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains(b.must));
    CHECK_FALSE(fs::exists(d / "out" / "scaled_add" / "c.h5"));
  }
  // The fixture file is a directory, or a symlink loop: named, exit 2 (not "field 'op' missing").
  fs::remove(d / "fx" / "scaled_add.toml");
  fs::create_directories(d / "fx" / "scaled_add.toml");
  auto rd = assay_test::run_assay("gen --fixtures " + (d / "fx").string() + " --op scaled_add -q --out " + (d / "out").string());
  INFO(rd.out);
  CHECK(rd.code == 2);
  CHECK(lines(rd.out) == 1);
  CHECK_THAT(rd.out, assay_test::Contains("scaled_add.toml: not a regular file"));
  fs::remove(d / "fx" / "scaled_add.toml");
  fs::create_symlink("scaled_add.toml", d / "fx" / "scaled_add.toml");
  auto rl = assay_test::run_assay("gen --fixtures " + (d / "fx").string() + " --op scaled_add -q --out " + (d / "out").string());
  INFO(rl.out);
  CHECK(rl.code == 2);
  CHECK(lines(rl.out) == 1);
  CHECK_THAT(rl.out, assay_test::Contains("scaled_add.toml"));
  // A golden or candidate that is a symlink loop: one line, exit 2 (was 125 "internal error").
  fs::create_symlink("loop.h5", d / "loop.h5");
  for (const auto& args : {"inspect " + (d / "loop.h5").string(), "compare " + (d / "loop.h5").string() + " " + kGolden,
                           "compare " + kGolden + " " + (d / "loop.h5").string()}) {
    auto r = run(args);
    INFO(args << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, assay_test::Contains("loop.h5"));
  }
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
}

TEST_CASE("HDF5 errors on worker threads print no library diagnostics, only our one line", "[cpu][L0]") {
  auto d = tmpdir("diag");
  fs::create_directories(d / "scaled_add");
  for (const auto& de : fs::directory_iterator(fs::path(ASSAY_SOURCE_DIR) / "golden" / "scaled_add"))
    fs::copy_file(de.path(), d / "scaled_add" / de.path().filename());
  fs::copy_file(fs::path(ASSAY_SOURCE_DIR) / "golden" / "MANIFEST", d / "MANIFEST");
  const auto bytes = slurp(d / "scaled_add" / "int_exact.h5");
  std::ofstream(d / "scaled_add" / "int_exact.h5", std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  auto r = run("gen --check --op scaled_add -q -j 2 --out " + d.string());
  INFO(r.out);
  CHECK(r.code != 0);
  CHECK_THAT(r.out, assay_test::Contains("int_exact.h5"));
  CHECK(r.out.find("HDF5-DIAG") == std::string::npos);
  CHECK(r.out.find("#000") == std::string::npos);
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
