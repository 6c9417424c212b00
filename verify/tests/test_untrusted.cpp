// Hostile input, second round: files written by someone assay should not trust (a candidate, a
// `.error` file, a fixture, an output path given on the command line) must never make assay read,
// load, replace or print something it was not asked to, crash or hang. Each TEST_CASE is one
// finding of the campaign; each failed before its fix. The commands run under `timeout`, so a
// regression to a hang fails (exit 124) instead of hanging the suite.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <hdf5.h>
#include <nlohmann/json.hpp>

#include "catch_compat.h"
#include "reference/core/check.h"
#include "verify/judge/compare.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/io/stale.h"
#include "fixtures/gen/case.h"
#include "verify/tests/cli_helpers.h"
#include "verify/judge/tolerance.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {
using assay_test::Run;
using assay_test::slurp;

const std::string kGolden = std::string(ASSAY_SOURCE_DIR) + "/golden/scaled_add/normal_odd_shape.h5";
fs::path tmpdir(const std::string& name) { return assay_test::fresh_dir("assay_test_untrusted", name); }
Run run_a(const std::string& args, const std::string& env = "") { return assay_test::run_assay(args, env + "timeout 60 "); }
using assay_test::lines;
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// A candidate file written with the raw HDF5 API, as an attacker's h5py would: /outputs/<name> for
// each output of the golden, each made by `make(file, dataset path, golden output)`.
template <class F>
void craft_candidate(const fs::path& path, const Golden& g, F make) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t grp = H5Gcreate2(f, "/outputs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(grp >= 0);
  for (const auto& o : g.outputs) make(f, "/outputs/" + o.expected.name, o.expected);
  H5Gclose(grp);
  REQUIRE(H5Fclose(f) >= 0);
}
hid_t space_of(const Tensor& t) {
  std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  return H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
}

// A no-op filter registered in this (test) process only, to write a dataset that names it.
size_t noop_filter(unsigned, size_t, const unsigned*, size_t nbytes, size_t*, void**) { return nbytes; }
constexpr H5Z_filter_t kUnknownFilter = 32123;
}  // namespace

TEST_CASE("untrusted candidate: external storage, external links and unknown filters are refused, no plugin loads",
          "[cpu][L0][hostile]") {
  const auto d = tmpdir("h5");
  const auto g = read_golden(kGolden);
  // (a) External raw storage pointing at a file of the attacker's choice: its bytes became the
  // repro bundle's /actual and the "got" values of the report.
  const auto secret = d / "secret.bin";
  {
    std::ofstream s(secret, std::ios::binary);
    const double v = 271828.182845;  // a value that must never appear in the output
    for (int i = 0; i < 1 << 16; ++i) s.write(reinterpret_cast<const char*>(&v), sizeof v);
  }
  craft_candidate(d / "external.h5", g, [&](hid_t f, const std::string& ds, const Tensor& t) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_external(dcpl, secret.c_str(), 0, static_cast<hsize_t>(t.size() * 8)) >= 0);
    const hid_t sp = space_of(t);
    const hid_t dd = H5Dcreate2(f, ds.c_str(), H5T_IEEE_F64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(dd >= 0);
    H5Dclose(dd), H5Sclose(sp), H5Pclose(dcpl);
  });
  {
    const auto r = run_a("compare " + kGolden + " " + q(d / "external.h5") + " --work-dir " + q(d / "repro"));
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains("external raw storage"));
    CHECK_THAT(r.out, !assay_test::Contains("271828"));
    CHECK_FALSE(fs::exists(d / "repro"));
  }
  // (b) An external link to a FIFO: HDF5 opened it and blocked (60 s per candidate in the probe).
  REQUIRE(::mkfifo((d / "fifo.h5").c_str(), 0600) == 0);
  craft_candidate(d / "elink.h5", g, [&](hid_t f, const std::string& ds, const Tensor&) {
    REQUIRE(H5Lcreate_external((d / "fifo.h5").c_str(), "/x", f, ds.c_str(), H5P_DEFAULT, H5P_DEFAULT) >= 0);
  });
  {
    const auto r = run_a("compare " + kGolden + " " + q(d / "elink.h5"), "");
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains("an external link: refused"));
  }
  // (c) A dataset naming a filter assay does not write, with $HDF5_PLUGIN_PATH holding a library:
  // HDF5 would dlopen every library there to find the filter.
  REQUIRE(H5Zregister(new H5Z_class2_t{H5Z_CLASS_T_VERS, kUnknownFilter, 1, 1, "assay-test-noop", nullptr, nullptr,
                                       noop_filter}) >= 0);
  craft_candidate(d / "filter.h5", g, [&](hid_t f, const std::string& ds, const Tensor& t) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    std::vector<hsize_t> chunk(t.shape.begin(), t.shape.end());
    REQUIRE(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) >= 0);
    REQUIRE(H5Pset_filter(dcpl, kUnknownFilter, H5Z_FLAG_MANDATORY, 0, nullptr) >= 0);
    const hid_t sp = space_of(t);
    const hid_t dd = H5Dcreate2(f, ds.c_str(), H5T_IEEE_F64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(dd >= 0);
    std::vector<double> v(t.data.begin(), t.data.end());
    REQUIRE(H5Dwrite(dd, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
    H5Dclose(dd), H5Sclose(sp), H5Pclose(dcpl);
  });
  const auto marker = d / "plugin-was-loaded";
  const auto env = "env HDF5_PLUGIN_PATH=" + fs::path(ASSAY_TEST_PLUGIN).parent_path().string() +
                   " ASSAY_TEST_PLUGIN_MARKER=" + marker.string() + " ";
  {
    const auto r = run_a("compare " + kGolden + " " + q(d / "filter.h5"), env);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains("filter 32123"));
    CHECK_FALSE(fs::exists(marker));
  }
  // The same through --golden-dir: the candidate's verdict is Failed, the run goes on.
  fs::create_directories(d / "gd");
  fs::create_directories(d / "cd");
  fs::copy_file(kGolden, d / "gd" / "normal_odd_shape.h5");
  fs::copy_file(d / "external.h5", d / "cd" / "normal_odd_shape.h5");
  {
    const auto r = run_a("compare --golden-dir " + q(d / "gd") + " --candidate-dir " + q(d / "cd"));
    INFO(r.out);
    CHECK(r.code == 1);
    CHECK_THAT(r.out, assay_test::Contains("Failed"));
    CHECK_THAT(r.out, assay_test::Contains("external raw storage"));
    CHECK_THAT(r.out, !assay_test::Contains("271828"));
  }
}

TEST_CASE("untrusted output paths: devices, FIFOs, links, directories and the inputs are never replaced",
          "[cpu][L0][hostile]") {
  const auto d = tmpdir("outputs");
  const auto g = read_golden(kGolden);
  // A candidate that passes: the golden's own rounded values as float64.
  {
    auto h = h5::File::create((d / "cand.h5").string());
    h.create_group("/outputs");
    for (const auto& o : g.outputs) {
      std::vector<double> v(o.expected.data.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = round_to(o.expected.dtype, o.expected.data[i]);
      h.write("/outputs/" + o.expected.name, h5::Elem::f64, o.expected.shape, v.data());
    }
  }
  REQUIRE(run_a("compare " + kGolden + " " + q(d / "cand.h5")).code == 0);
  REQUIRE(::mkfifo((d / "fifo").c_str(), 0600) == 0);
  fs::create_directories(d / "dir");
  std::ofstream(d / "target") << "keep me\n";
  fs::create_symlink(d / "target", d / "link");
  const auto golden_copy = d / "golden.h5";
  fs::copy_file(kGolden, golden_copy);
  const std::string before = slurp(golden_copy), cand_before = slurp(d / "cand.h5");
  struct Out {
    fs::path path;
    const char* why;
  };
  for (const auto& o : {Out{d / "fifo", "not a regular file"}, Out{d / "dir", "not a regular file"},
                        Out{d / "link", "symbolic link"}, Out{golden_copy, "one of this run's inputs"},
                        Out{d / "cand.h5", "one of this run's inputs"}}) {
    for (const char* opt : {"--json-file", "--junit", "--html"}) {
      const auto r = run_a("compare " + q(golden_copy) + " " + q(d / "cand.h5") + " " + opt + " " + q(o.path));
      INFO(opt << " " << o.path << ": " << r.out);
      CHECK(r.code == 2);
      CHECK(lines(r.out) == 1);
      CHECK_THAT(r.out, assay_test::Contains(o.why));
    }
  }
  CHECK(fs::is_fifo(d / "fifo"));
  CHECK(fs::is_symlink(d / "link"));
  CHECK(slurp(d / "target") == "keep me\n");
  CHECK(slurp(golden_copy) == before);
  CHECK(slurp(d / "cand.h5") == cand_before);
  // calibrate's and verify's report files, and inspect --decode, likewise.
  for (const auto& args : {std::string("calibrate --op scaled_add --case int_exact --json-file ") + q(d / "fifo"),
                           std::string("verify --list --json-file ") + q(d / "link"),
                           std::string("inspect ") + q(golden_copy) + " --decode " + q(d / "link") + ".h5"}) {
    if (args.find("--decode") != std::string::npos) fs::create_symlink(d / "target", d / "link.h5");
    const auto r = run_a(args);
    INFO(args << ": " << r.out);
    CHECK(r.code == 2);
  }
  CHECK(fs::is_fifo(d / "fifo"));
  CHECK(slurp(d / "target") == "keep me\n");
  // gen's MANIFEST: a symbolic link there is not replaced.
  fs::create_directories(d / "gen_out");
  fs::create_symlink(d / "target", d / "gen_out" / "MANIFEST");
  {
    const auto r = run_a("gen -q --op scaled_add --out " + q(d / "gen_out"));
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(fs::is_symlink(d / "gen_out" / "MANIFEST"));
    CHECK(slurp(d / "target") == "keep me\n");
  }
  // inspect --decode onto an existing file that is not a directory: exit 2, not 125.
  const auto r = run_a("inspect " + q(golden_copy) + " --decode " + q(d / "target"));
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, assay_test::Contains("is not a directory"));
}

TEST_CASE("untrusted .error files: FIFOs, links, huge files, directories and over-long names are the case's Failed",
          "[cpu][L0][hostile]") {
  const auto d = tmpdir("error_files");
  const auto gd = d / "golden", cd = d / "cands";
  fs::create_directories(gd), fs::create_directories(cd);
  for (const char* n : {"fifo", "zero", "sparse", "dir", "loop", "hung", "ctrl"}) fs::copy_file(kGolden, gd / (std::string(n) + ".h5"));
  // A case name so long that <case>.error is over NAME_MAX while <case>.h5 is not.
  const std::string longname(250, 'n');
  fs::copy_file(kGolden, gd / (longname + ".h5"));
  REQUIRE(::mkfifo((cd / "fifo.error").c_str(), 0600) == 0);
  fs::create_symlink("/dev/zero", cd / "zero.error");
  {
    std::ofstream s(cd / "sparse.error");
    s << "first line of a huge error file\n";
  }
  fs::resize_file(cd / "sparse.error", std::uintmax_t{1} << 30);  // 1 GiB, mostly NULs (sparse)
  fs::create_directories(cd / "dir.error");
  fs::create_symlink("loop.error", cd / "loop.error");
  std::ofstream(cd / "hung.error") << "Hung: the kernel did not return within 300 s (--timeout)\n";
  std::ofstream(cd / "ctrl.error") << "bad\x1b[31mred\x07 text\rover\n";
  const auto r = run_a("compare --golden-dir " + q(gd) + " --candidate-dir " + q(cd) + " --json-file " + q(d / "r.json"));
  INFO(r.out.substr(0, 4000));
  CHECK(r.code == 1);
  CHECK(r.out.size() < 200000);  // not 1 GB of NULs
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find('\x07') == std::string::npos);
  CHECK(r.out.find('\0') == std::string::npos);
  CHECK_THAT(r.out, assay_test::Contains("\\x1b[31mred\\x07 text\\x0dover"));
  const auto j = nlohmann::json::parse(slurp(d / "r.json"));
  std::map<std::string, std::string> verdict;
  for (const auto& c : j["cases"]) verdict[fs::path(c["golden"].get<std::string>()).stem().string()] = c["verdict"];
  for (const char* n : {"fifo", "zero", "sparse", "dir", "loop", "ctrl"}) {
    INFO(n);
    CHECK(verdict[n] == "Failed");
  }
  CHECK(verdict["hung"] == "Hung");
  CHECK(verdict[longname] == "NotRun");  // no candidate; the .error name cannot exist
  CHECK(slurp(d / "r.json").size() < 400000);
}

TEST_CASE("untrusted fixtures: deep nesting and absurd sizes give one line and exit 2, never a crash",
          "[cpu][L0][hostile]") {
  const auto d = tmpdir("fixture_sizes");
  // gen parses and runs the case; gen --list parses the file (the nesting bound applies there too).
  auto one_line_exit2 = [&](const std::string& op, const std::string& body, const std::string& must, bool list = false) {
    const auto fx = d / ("fx_" + std::to_string(std::hash<std::string>{}(body)));
    fs::create_directories(fx);
    std::ofstream(fx / (op + ".toml")) << "op = \"" << op << "\"\n[[case]]\nname = \"c\"\nlevel = \"L0\"\n" << body;
    for (const std::string& cmd : {"gen -q --out " + q(d / "out"), list ? std::string("gen --list") : "gen -q --out " + q(d / "out2")}) {
      const auto r = run_a(cmd + " --fixtures " + q(fx) + " --op " + op);
      INFO(op << " " << body.substr(0, 200) << ": " << cmd << ": " << r.out.substr(0, 2000));
      CHECK(r.code == 2);
      CHECK_THAT(r.out, assay_test::Contains(must));
      CHECK(r.out.size() < 6000);
    }
  };
  // 70,000 dotted key parts inside a [[case]]: the TOML parser recursed once per part (exit 139).
  std::string key = "a";
  for (int i = 0; i < 70000; ++i) key += ".a";
  one_line_exit2("scaled_add", "B = 1\nT = 2\nD = 2\n" + key + " = 1\n", "a dotted key nested deeper than 64 levels", true);
  std::string arr(70000, '[');
  one_line_exit2("scaled_add", "B = 1\nT = 2\nD = 2\nx = " + arr + "\n", "arrays or tables nested deeper than 64 levels", true);
  // Chunk, tile and split sizes: heap corruption (134), segfaults, bad_alloc (125) before.
  const std::string gdn = "T = 8\nH = 1\nK = 4\nV = 4\n", ssd = "B = 1\nT = 8\nH = 1\nP = 2\nN = 2\n";
  for (const char* cs : {"4611686018427387904", "9223372036854775807", "65536", "1099511627776"}) {
    one_line_exit2("gated_delta", gdn + "chunk_size = " + cs + "\n", "field 'chunk_size'");
    one_line_exit2("ssd", ssd + "chunk_size = " + cs + "\n", "field 'chunk_size'");
  }
  const std::string att = "B = 1\nHq = 1\nHkv = 1\nD = 8\nSq = 4\nSk = 4\n";
  one_line_exit2("attention", att + "tile_n = 1099511627776\n", "field 'tile_");
  one_line_exit2("attention", att + "num_splits = 1099511627776\n", "field 'num_splits'");
}

TEST_CASE("untrusted text and environment: control characters escaped, ASSAY_MAX_MEMORY checked, --shard 0/0, "
          "a full stdout, a missing TMPDIR",
          "[cpu][L0][hostile]") {
  const auto d = tmpdir("text");
  const auto g = read_golden(kGolden);
  // A candidate whose precision_profile attribute carries terminal escapes and newlines.
  {
    auto h = h5::File::create((d / "cand.h5").string());
    h.create_group("/outputs");
    for (const auto& o : g.outputs) h.write("/outputs/" + o.expected.name, h5::Elem::f64, o.expected.shape, o.expected.data.data());
    h.set_attr("/", "precision_profile", std::string("x\x1b]0;owned\x07\nsecond line\r") + std::string(100000, 'A'));
  }
  {
    const auto r = run_a("compare " + kGolden + " " + q(d / "cand.h5"));
    INFO(r.out.substr(0, 3000));
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK(r.out.find('\x1b') == std::string::npos);
    CHECK(r.out.find('\r') == std::string::npos);
    CHECK(r.out.size() < 3000);
  }
  for (const char* v : {"garbage", "0", "-1", "8X"}) {
    const auto r = run_a("gen --list --op scaled_add", std::string("env ASSAY_MAX_MEMORY=") + v + " ");
    INFO(v << ": " << r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains("ASSAY_MAX_MEMORY"));
  }
  CHECK(run_a("gen --list --op scaled_add", "env ASSAY_MAX_MEMORY=8G ").code == 0);
  {
    const auto r = run_a("gen -q --op scaled_add --out " + q(d / "small"), "env ASSAY_MAX_MEMORY=1K ");
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains("memory limit"));
  }
  {
    const auto r = run_a("verify --list --shard 0/0");
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains("--shard"));
  }
  if (fs::exists("/dev/full")) {
    const auto r = assay_test::run_shell("{ " + std::string(ASSAY_EXE) + " gen --list --op scaled_add >/dev/full; }");
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, assay_test::Contains("standard output"));
  }
  {
    const auto r = run_a("verify --op scaled_add", "env TMPDIR=" + (d / "no-such-dir").string() + " ");
    INFO(r.out);
    CHECK(r.code != 125);
    CHECK(lines(r.out) >= 1);
  }
}

TEST_CASE("a run over many goldens of one op parses its fixture once", "[cpu][L0][hostile]") {
  // 100 goldens against a 10,000-case fixture took 30.8 s (the fixture parsed per golden).
  const fs::path dir = fs::path(ASSAY_SOURCE_DIR) / "golden" / "gated_delta";
  std::vector<Golden> goldens;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h5") goldens.push_back(read_golden(e.path().string()));
  REQUIRE(goldens.size() >= 10);
  const auto before = gen::load_fixture_count();
  // (This test binary has no op bindings: check_stale stops at "op not built in", after reading
  // the fixture, which is what is counted.)
  const std::string fixtures = (std::filesystem::path(ASSAY_SOURCE_DIR) / "fixtures").string();
  for (const auto& g : goldens) (void)check_stale(g, fixtures);
  CHECK(gen::load_fixture_count() - before <= 1);
}

TEST_CASE("verify --plugin on a FIFO is refused at once", "[cpu][L0][hostile]") {
  const auto d = tmpdir("plugin");
  REQUIRE(::mkfifo((d / "plugin.so").c_str(), 0600) == 0);
  const auto r = run_a("verify --list --plugin " + q(d / "plugin.so"));
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, assay_test::Contains("not a regular file"));
}

TEST_CASE("every committed golden accepts its own /rounded codes under its strict rule", "[cpu][L0][hostile]") {
  const fs::path root = fs::path(ASSAY_SOURCE_DIR) / "golden";
  std::map<std::string, TolerancePolicy> policies;
  int n = 0, with_rounded = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().extension() != ".h5") continue;
    const auto g = read_golden(e.path().string());
    if (!policies.count(g.prov.op))
      policies[g.prov.op] = TolerancePolicy::for_ops(std::string(ASSAY_SOURCE_DIR) + "/fixtures", {g.prov.op});
    const auto& pol = policies[g.prov.op];
    INFO(e.path().string());
    CHECK_NOTHROW(check_rounded_accepted(g, pol));
    ++n;
    for (const auto& o : g.outputs) with_rounded += o.rounded.has_value();
  }
  CHECK(n > 100);
  CHECK(with_rounded > 100);
  // And the check itself rejects a golden whose codes decode elsewhere.
  auto g = read_golden(std::string(ASSAY_SOURCE_DIR) + "/golden/quant/nvfp4_nonfinite.h5");
  const auto pol = TolerancePolicy::for_ops(std::string(ASSAY_SOURCE_DIR) + "/fixtures", {"quant"});
  for (auto& o : g.outputs)
    if (o.expected.name == "xhat_row" && o.rounded) (*o.rounded)[0] = 0x7f800000u;  // +Inf
  CHECK_THROWS_AS(check_rounded_accepted(g, pol), assay::OracleDisagreement);
}
