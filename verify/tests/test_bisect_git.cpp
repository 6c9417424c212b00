// `assay bisect --git` (verify/bisect/bisect_git.h), end to end: a temp git repository holding a tiny
// C++ kernel (scaled_add: out = alpha*x + beta*y in bf16) that writes a real candidate for the
// committed golden golden/scaled_add/int_exact.h5; one commit plants a bug (alpha and beta swapped),
// one does not build. The assay binary is run as a separate process.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.h"
#include "verify/bisect/bisect_git.h"
#include "verify/tests/cli_helpers.h"

namespace fs = std::filesystem;

namespace {

using assay_test::Run;

const std::string kGoldenDir = std::string(ASSAY_SOURCE_DIR) + "/golden/scaled_add";

std::string sq(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

Run sh(const std::string& cmd) { return assay_test::run_shell(cmd); }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string git(const fs::path& repo, const std::string& args) {
  const auto r = sh("git -C " + sq(repo.string()) + " " + args);
  INFO("git " << args << ": " << r.out);
  REQUIRE(r.code == 0);
  return trim(r.out);
}

// HDF5 for the kernel's compiler line: compile definitions (see the report), else the environment,
// else the Debian paths.
std::string hdf5_flags() {
#if defined(ASSAY_TEST_HDF5_INCLUDE) && defined(ASSAY_TEST_HDF5_LIB)
  return std::string("-I") + ASSAY_TEST_HDF5_INCLUDE + " " + ASSAY_TEST_HDF5_LIB;
#else
  const char* inc = std::getenv("ASSAY_TEST_HDF5_INCLUDE");
  const char* lib = std::getenv("ASSAY_TEST_HDF5_LIB");
  return std::string("-I") + (inc ? inc : "/usr/include/hdf5/serial") + " " + (lib ? lib : "-lhdf5_serial");
#endif
}

// The kernel: reads /case alpha, beta and /inputs/x, y (bf16 codes) of the golden, writes
// /outputs/out = round_bf16(A*x + B*y) as float32. EXPR is the arithmetic (the planted bug swaps
// alpha and beta); `extra` is appended to the source (a syntax error for the commit that does not build).
std::string kernel_source(const std::string& expr, const std::string& comment, const std::string& extra = "") {
  return R"(// tiny scaled_add kernel: )" + comment + R"(
#include <hdf5.h>
#include <cstdint>
#include <cstring>
#include <vector>
static float from_bf16(uint16_t c) { uint32_t u = uint32_t(c) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static float round_bf16(double v) {
  float f = static_cast<float>(v);
  uint32_t u; std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u); u &= 0xffff0000u;
  std::memcpy(&f, &u, 4); return f;
}
static double attr(hid_t f, const char* name) {
  double v = 0; hid_t a = H5Aopen_by_name(f, "/case", name, H5P_DEFAULT, H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_DOUBLE, &v); H5Aclose(a); return v;
}
int main(int argc, char** argv) {
  if (argc != 3) return 2;
  hid_t f = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return 3;
  const double alpha = attr(f, "alpha"), beta = attr(f, "beta");
  hid_t dx = H5Dopen2(f, "/inputs/x", H5P_DEFAULT), dy = H5Dopen2(f, "/inputs/y", H5P_DEFAULT);
  hid_t sp = H5Dget_space(dx);
  const int nd = H5Sget_simple_extent_ndims(sp);
  std::vector<hsize_t> dims(nd);
  H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
  size_t n = 1; for (auto d : dims) n *= d;
  std::vector<uint16_t> x(n), y(n);
  H5Dread(dx, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data());
  H5Dread(dy, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double xi = from_bf16(x[i]), yi = from_bf16(y[i]);
    out[i] = round_bf16()" + expr + R"();
  }
  hid_t g = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0) return 4;
  hid_t grp = H5Gcreate2(g, "/outputs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t s2 = H5Screate_simple(nd, dims.data(), nullptr);
  hid_t d = H5Dcreate2(grp, "out", H5T_IEEE_F32LE, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Dclose(d); H5Sclose(s2); H5Gclose(grp); H5Fclose(g);
  H5Sclose(sp); H5Dclose(dx); H5Dclose(dy); H5Fclose(f);
  return 0;
}
)" + extra;
}

const std::string kGood = "alpha * xi + beta * yi", kBug = "beta * xi + alpha * yi";

struct Repo {
  fs::path dir;
  std::vector<std::string> commits;  // hashes, oldest first
  std::string planted, broken;       // the bug's commit, the commit that does not build
};

void commit(Repo& r, const std::string& source, const std::string& msg, bool slow = false) {
  std::ofstream(r.dir / "kernel.cpp") << source;
  if (slow) std::ofstream(r.dir / "slow") << "the build sleeps here\n";
  else fs::remove(r.dir / "slow");
  git(r.dir, "add -A");
  git(r.dir, "commit -q -m " + sq(msg));
  r.commits.push_back(git(r.dir, "rev-parse HEAD"));
}

void init(Repo& r, const std::string& name) {
  r.dir = assay_test::fresh_dir("assay_test_bisect", name) / "repo";
  fs::create_directories(r.dir);
  git(r.dir, "init -q -b main");
  git(r.dir, "config user.name 'Assay Test'");
  git(r.dir, "config user.email assay@example.invalid");
  git(r.dir, "config commit.gpgsign false");
  std::ofstream(r.dir / ".gitignore") << "kernel\n";
}

// c0 good (GOOD), c1 BUG, c2 does not build, c3 bad, c4 bad, c5 bad (BAD). git's first midpoint of
// this history is c2 (then c3, then c1). `slow`: commits c1..c4 hold a file `slow` (the SIGINT test's
// build sleeps there).
Repo make_repo(const std::string& name, bool slow = false) {
  Repo r;
  init(r, name);
  commit(r, kernel_source(kGood, "v1"), "kernel v1");
  commit(r, kernel_source(kBug, "v2, fused"), "fuse the scales", slow);
  r.planted = r.commits.back();
  commit(r, kernel_source(kBug, "v3", "this does not compile;\n"), "wip: half of a refactor", slow);
  r.broken = r.commits.back();
  commit(r, kernel_source(kBug, "v3"), "finish the refactor", slow);
  commit(r, kernel_source(kBug, "v3, comments"), "comments", slow);
  commit(r, kernel_source(kBug, "v3, docs"), "docs");
  return r;
}

std::string build_cmd(const std::string& before = "") {
  return "sh -c " + sq(before + "g++ -O0 -w kernel.cpp -o kernel " + hdf5_flags());
}

std::string bisect_args(const Repo& r, const std::string& good, const std::string& bad, const std::string& build,
                        const std::string& more = "") {
  return "bisect --git " + good + " " + bad + " --repo " + sq(r.dir.string()) +
         " --candidate-cmd './kernel {golden} {out}' --case int_exact --golden " + sq(kGoldenDir) + " " +
         (more.find("--timeout") == std::string::npos ? "--timeout 120 " : "") +
         (more.find("--work-dir") == std::string::npos ? "--work-dir " + sq((r.dir.parent_path() / "work").string()) + " " : "") + more +
         " -- " + build;
}

void require_as_found(const Repo& r, const std::string& head) {
  CHECK(git(r.dir, "symbolic-ref --short HEAD") == "main");
  CHECK(git(r.dir, "rev-parse HEAD") == head);
  CHECK(git(r.dir, "status --porcelain --untracked-files=no").empty());
  CHECK_FALSE(fs::exists(r.dir / ".git" / "BISECT_START"));
  CHECK_FALSE(fs::exists(r.dir / ".git" / "BISECT_LOG"));
}

int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = 0; (p = s.find(needle, p)) != std::string::npos; p += needle.size()) ++n;
  return n;
}

}  // namespace

TEST_CASE("bisect --git finds the planted commit, skips the unbuildable one, leaves the repo as found", "[cpu][bisect]") {
  auto r = make_repo("found");
  const std::string head = r.commits.back();
  const auto work = r.dir.parent_path() / "work";
  const auto run = assay_test::run_assay(bisect_args(r, r.commits.front(), "main", build_cmd(), "-v --work-dir " + sq(work.string())));
  INFO(run.out);
  REQUIRE(run.code == 1);
  CHECK(run.out.find("first bad commit: " + r.planted + " fuse the scales\n") != std::string::npos);
  // The failing case at that commit, from its report.
  CHECK(run.out.find("scaled_add/int_exact: Incorrect:") != std::string::npos);
  // No other commit is named as the first bad one.
  CHECK(count(run.out, "\nfirst bad commit: ") == 1);
  // The unbuildable commit: skipped when git visited it (the progress lines say which it visited).
  const bool visited = run.out.find("bisect: " + r.broken.substr(0, 12)) != std::string::npos;
  if (visited) {
    CHECK(run.out.find("bisect: " + r.broken.substr(0, 12) + " wip: half of a refactor: build failed") != std::string::npos);
    CHECK(run.out.find("skipped (did not build or could not be judged): " + r.broken) != std::string::npos);
  }
  CHECK(visited);  // the history is laid out so that git's first midpoint is the broken commit
  // -v: GOOD and BAD were judged first.
  CHECK(run.out.find("bisect: " + r.commits.front().substr(0, 12) + " kernel v1: 1 Passed -> 0 (good)") != std::string::npos);
  CHECK(run.out.find("bisect: " + head.substr(0, 12) + " docs: 1 Incorrect -> 1 (bad)") != std::string::npos);
  // The generated script quotes paths and judges with the copied binary.
  CHECK(fs::exists(work / "bisect.sh"));
  CHECK(fs::exists(work / "commits" / r.planted / "report.json"));
  CHECK(fs::exists(work / "commits" / r.planted / "candidates" / "int_exact.h5"));
  require_as_found(r, head);
}

TEST_CASE("bisect --git: only skipped commits left gives exit 125 and lists the candidates", "[cpu][bisect]") {
  Repo r;
  init(r, "only_skip");
  commit(r, kernel_source(kGood, "v1"), "kernel v1");
  commit(r, kernel_source(kGood, "v1", "this does not compile;\n"), "broken");
  commit(r, kernel_source(kBug, "v2"), "bug");
  const auto run = assay_test::run_assay(bisect_args(r, r.commits[0], "main", build_cmd()));
  INFO(run.out);
  CHECK(run.code == 125);
  CHECK(run.out.find("only skipped commits are left to test; the first bad commit could be any of: ") != std::string::npos);
  CHECK(run.out.find(r.commits[1]) != std::string::npos);
  CHECK(run.out.find(r.commits[2]) != std::string::npos);
  CHECK(run.out.find("skipped (did not build or could not be judged): " + r.commits[1]) != std::string::npos);
  require_as_found(r, r.commits.back());
}

TEST_CASE("bisect --git: a commit past --timeout is skipped, its build killed", "[cpu][bisect]") {
  auto r = make_repo("timeout", /*slow=*/true);  // c1..c4 sleep: every commit between GOOD and BAD times out
  const auto t0 = std::chrono::steady_clock::now();
  const auto run = assay_test::run_assay(bisect_args(r, r.commits.front(), "main", build_cmd("if [ -f slow ]; then sleep 60; fi; "),
                                                     "--timeout 5 -v"));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(run.out);
  CHECK(run.code == 125);
  CHECK(run.out.find("timed out after 5 s (build and judge) -> 125 (skip)") != std::string::npos);
  CHECK(run.out.find("only skipped commits are left to test") != std::string::npos);
  // 5 s leaves a loaded 2-core machine time to build and judge GOOD and BAD (2 s did not); each
  // skipped commit costs its 5 s, and a build left sleeping would cost its 60 s.
  CHECK(took < 55);
  require_as_found(r, r.commits.back());
}

TEST_CASE("bisect --git refuses a dirty tree, a bisect in progress, GOOD not an ancestor, a bad GOOD", "[cpu][bisect]") {
  auto r = make_repo("refuse");
  const std::string head = r.commits.back();
  SECTION("dirty tree: exit 2, one line naming the repository") {
    std::ofstream(r.dir / "kernel.cpp", std::ios::app) << "// an edit\n";
    const auto run = assay_test::run_assay(bisect_args(r, r.commits.front(), "main", build_cmd()));
    INFO(run.out);
    CHECK(run.code == 2);
    CHECK(count(run.out, "\n") == 1);
    CHECK(run.out.find(r.dir.string()) != std::string::npos);
    CHECK(run.out.find("uncommitted changes") != std::string::npos);
    git(r.dir, "checkout -q -- kernel.cpp");
    require_as_found(r, head);
  }
  SECTION("a bisect in progress") {
    git(r.dir, "bisect start");
    const auto run = assay_test::run_assay(bisect_args(r, r.commits.front(), "main", build_cmd()));
    INFO(run.out);
    CHECK(run.code == 2);
    CHECK(run.out.find("already in progress") != std::string::npos);
    git(r.dir, "bisect reset");
  }
  SECTION("GOOD not an ancestor of BAD") {
    const auto run = assay_test::run_assay(bisect_args(r, r.commits.back(), r.commits.front(), build_cmd()));
    INFO(run.out);
    CHECK(run.code == 2);
    CHECK(count(run.out, "\n") == 1);
    CHECK(run.out.find("is not an ancestor of BAD") != std::string::npos);
    require_as_found(r, head);
  }
  SECTION("GOOD is a bad commit: exit 2 naming it, the repo as found") {
    const auto bad_good = r.commits[4];
    const auto run = assay_test::run_assay(bisect_args(r, bad_good, "main", build_cmd()));
    INFO(run.out);
    CHECK(run.code == 2);
    CHECK(count(run.out, "\n") == 1);
    CHECK(run.out.find("GOOD " + bad_good) != std::string::npos);
    CHECK(run.out.find("is not good: 1 Incorrect") != std::string::npos);
    require_as_found(r, head);
  }
}

TEST_CASE("bisect --git never runs a golden's file name and touches nothing before its checks", "[cpu][bisect][hostile]") {
  auto r = make_repo("hostile_names");
  const std::string head = r.commits.back();
  const auto base = r.dir.parent_path();
  // A golden directory whose one golden is named to run commands if it reached a shell as text.
  const auto gd = base / "goldens";
  fs::create_directories(gd);
  const std::string evil = "x$(touch PWNED)`touch PWNED_bt`;touch PWNED_semi;y";
  fs::copy_file(kGoldenDir + "/int_exact.h5", gd / (evil + ".h5"));
  // The user quotes the placeholders (double, then single quotes): both used to cancel assay's own.
  for (const std::string cmd : {"./kernel \"{golden}\" \"{out}\"", "./kernel '{golden}' '{out}'", "./kernel {golden} {out}"}) {
    const auto work = base / ("work" + std::to_string(cmd.size()) + std::to_string(cmd[9]));
    const auto run = assay_test::run_assay("bisect --git " + r.commits[0] + " " + r.commits[1] + " --repo " + sq(r.dir.string()) +
                                           " --candidate-cmd " + sq(cmd) + " --golden " + sq(gd.string()) +
                                           " --timeout 120 --work-dir " + sq(work.string()) + " -- " + build_cmd(),
                                           "cd " + sq(base.string()) + " && ");
    INFO(cmd << ": " << run.out);
    CHECK(run.code == 1);
    CHECK(run.out.find("first bad commit: " + r.planted) != std::string::npos);
    for (const auto* p : {"PWNED", "PWNED_bt", "PWNED_semi"}) {
      CHECK_FALSE(fs::exists(r.dir / p));
      CHECK_FALSE(fs::exists(base / p));
    }
    require_as_found(r, head);
  }
  // --work-dir inside the repository, with a tracked file named `commits`: refused, nothing deleted.
  std::ofstream(r.dir / "commits") << "tracked\n";
  git(r.dir, "add commits");
  git(r.dir, "commit -q -m 'a tracked file named commits'");
  const std::string head2 = git(r.dir, "rev-parse HEAD");
  const auto run = assay_test::run_assay(bisect_args(r, r.commits.front(), "main", build_cmd(), "--work-dir " + sq(r.dir.string())));
  INFO(run.out);
  CHECK(run.code == 2);
  CHECK(run.out.find("--work-dir " + r.dir.string()) != std::string::npos);
  CHECK(fs::exists(r.dir / "commits"));
  require_as_found(r, head2);
  // A new directory inside the work tree: refused by name, not created.
  const auto run_in = assay_test::run_assay(bisect_args(r, r.commits.front(), "main", build_cmd(), "--work-dir " + sq((r.dir / "bisect-work").string())));
  INFO(run_in.out);
  CHECK(run_in.code == 2);
  CHECK(run_in.out.find("inside the repository") != std::string::npos);
  CHECK_FALSE(fs::exists(r.dir / "bisect-work"));
  require_as_found(r, head2);
  // A non-empty directory that no bisect made: refused, its files kept.
  const auto mine = base / "my-notes";
  fs::create_directories(mine / "commits");
  std::ofstream(mine / "commits" / "keep.txt") << "mine\n";
  const auto run2 = assay_test::run_assay(bisect_args(r, r.commits.front(), "main", build_cmd(), "--work-dir " + sq(mine.string())));
  INFO(run2.out);
  CHECK(run2.code == 2);
  CHECK(fs::exists(mine / "commits" / "keep.txt"));
}

TEST_CASE("bisect --git: SIGINT while a commit builds leaves the repository as found", "[cpu][bisect]") {
  auto r = make_repo("sigint", /*slow=*/true);
  const std::string head = r.commits.back();
  const auto base = r.dir.parent_path();
  const auto marker = base / "sleeping", out = base / "assay.out";
  const auto cmd = std::string(ASSAY_EXE) + " " +
                   bisect_args(r, r.commits.front(), "main",
                               build_cmd("if [ -f slow ]; then touch " + sq(marker.string()) + "; sleep 60; fi; ")) +
                   " > " + sq(out.string()) + " 2>&1";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(marker) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(40))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool slept = fs::exists(marker);
  CHECK(slept);
  CHECK(fs::exists(r.dir / ".git" / "BISECT_START"));  // it was bisecting
  ::kill(pid, SIGINT);
  int st = 0;
  const auto t1 = std::chrono::steady_clock::now();
  ::waitpid(pid, &st, 0);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const std::string text = assay_test::slurp(out);
  INFO(text);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 130);
  CHECK(waited < 15);  // the sleeping build was killed, not waited for
  CHECK(text.find("interrupted (SIGINT)") != std::string::npos);
  require_as_found(r, head);
  // No process of the run is left (the build's `sleep 60` in particular).
  const auto left = sh("pgrep -f " + sq("[t]ouch " + marker.string()));
  CHECK(left.code != 0);
}
