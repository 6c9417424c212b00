// The CLI on bad input (README "Bad input"), run as separate processes: one line naming the file,
// dataset or field, a non-zero exit, never a crash and never a half-written golden.
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

using namespace assay_test::cli;

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
    exit2(assay_test::run_assay("--max-memory " + limit + " inspect " + kGolden), "datasets together need");
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

TEST_CASE("fixture fields: NaN, Inf and out-of-range values are refused by name, a fixture path must be a file", "[cpu][L0]") {
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

