// assay: fixtures -> goldens (gen), what a golden holds (inspect), golden vs candidate (compare).
// Exit codes: 0 pass, 1 numerical failure, 2 usage or input error, 125 could not run.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string_view>
#include <cctype>

#include "assay_build.h"
#include "reference/core/check.h"
#include "reference/core/prefault.h"
#include "reference/core/tensor.h"
#include "verify/cli/cli.h"
#include "verify/io/safe_files.h"
#include "verify/judge/verdict.h"

namespace assay::cli {

namespace {
namespace fs = std::filesystem;
// <exe>/../share/assay/<what> for an installed binary ("" when the executable cannot be found).
std::string installed(const char* what) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return (exe.parent_path().parent_path() / "share" / "assay" / what).string();
}
bool has_toml(const fs::path& d, const std::string& op) {
  std::error_code ec;
  if (!fs::is_directory(d, ec)) return false;
  if (!op.empty()) return fs::is_regular_file(d / (op + ".toml"), ec);
  for (const auto& de : fs::directory_iterator(d, ec))
    if (de.path().extension() == ".toml") return true;
  return false;
}
}  // namespace

std::string fixtures_for(const Common& common, const std::string& golden, const std::string& op) {
  const char* env = std::getenv("ASSAY_FIXTURES");
  if (!common.fixtures_dir.empty() || (env && *env)) {
    const std::string d = !common.fixtures_dir.empty() ? common.fixtures_dir : env;
    if (!op.empty() && !has_toml(d, op))
      throw InputError(fmt::format("{}: no fixture for op '{}' ({} given by {}); the golden {} cannot be judged without it",
                                   (fs::path(d) / (op + ".toml")).string(), op, d,
                                   common.fixtures_dir.empty() ? "$ASSAY_FIXTURES" : "--fixtures", golden));
    return d;
  }
  std::vector<std::string> looked;
  std::error_code ec;
  fs::path p = fs::absolute(golden.empty() ? fs::path(".") : fs::path(golden), ec);
  if (!ec) {
    p = p.lexically_normal();
    if (!fs::is_directory(p, ec)) p = p.parent_path();
    // golden/<op>/<case>.h5, golden/<op>, golden, <root>: four ancestors reach the data root.
    for (int up = 0; up < 4 && !p.empty(); ++up, p = p.parent_path()) {
      const fs::path f = p / "fixtures";
      if (has_toml(f, op)) return f.string();
      looked.push_back(f.string());
      if (p == p.root_path()) break;
    }
  }
  for (const std::string& f : {installed("fixtures"), std::string(ASSAY_SOURCE_DIR) + "/fixtures"}) {
    if (f.empty()) continue;
    if (has_toml(f, op)) return f;
    looked.push_back(f);
  }
  std::string where;
  for (const auto& l : looked) where += (where.empty() ? "" : ", ") + l;
  throw InputError(fmt::format("{}: no fixtures found for these goldens (looked in {}); give --fixtures DIR or set "
                               "$ASSAY_FIXTURES", golden.empty() ? "." : golden, where));
}

std::string default_golden_dir(const std::string& level) {
  if (level == "L0") {
    if (const char* e = std::getenv("ASSAY_GOLDEN"); e && *e) return e;
    std::error_code ec;
    const std::string inst = installed("golden"), src = std::string(ASSAY_SOURCE_DIR) + "/golden";
    if (!inst.empty() && fs::is_directory(inst, ec)) return inst;
    if (fs::is_directory(src, ec)) return src;
    throw InputError(fmt::format("no golden directory: neither {} nor {} exists; give --golden DIR or set $ASSAY_GOLDEN",
                                 inst.empty() ? "<exe>/../share/assay/golden" : inst, src));
  }
  return std::string(ASSAY_BINARY_DIR) + "/golden-" + level;
}

namespace {
std::optional<int64_t> g_max_memory;  // --max-memory / $ASSAY_MAX_MEMORY, when given
}  // namespace
std::optional<int64_t> max_memory_given() { return g_max_memory; }
void set_max_memory_given(int64_t bytes) { g_max_memory = bytes; }

// A size as --max-memory takes it: bytes, or a number with K, M, G or T (powers of 1024, an
// optional trailing B or iB). Nothing else: 0, negative, garbage and overflow give nullopt.
std::optional<int64_t> parse_size(std::string_view s) {
  size_t i = 0;
  int64_t v = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v)) return std::nullopt;
  if (i == 0) return std::nullopt;
  std::string unit(s.substr(i));
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!unit.empty() && std::string_view("KMGT").find(unit[0]) != std::string_view::npos) {
    shift = 10 * (1 + static_cast<int>(std::string_view("KMGT").find(unit[0])));
    unit.erase(0, 1);
    if (unit == "IB" || unit == "B") unit.clear();
  } else if (unit == "B") {
    unit.clear();
  }
  if (!unit.empty() || v <= 0 || v > (std::numeric_limits<int64_t>::max() >> shift)) return std::nullopt;
  return v << shift;
}

}  // namespace assay::cli

int main(int argc, char** argv) {
  using namespace assay;
  keep_freed_memory();  // fresh outputs reuse mapped pages (prefault.h)
  guard_inputs();       // an output path that is one of the run's inputs is refused (safe_files.h)
  // $ASSAY_MAX_MEMORY takes what --max-memory takes, and a value that does not parse is an error,
  // not silently the default (--max-memory, parsed later, overrides it).
  if (const char* e = std::getenv("ASSAY_MAX_MEMORY")) {
    const auto v = cli::parse_size(e);
    if (!v) {
      std::cerr << "assay: error: ASSAY_MAX_MEMORY='" << printable(e, 80)
                << "': expected a positive size in bytes, or with K / M / G / T (e.g. 512M, 8G)\n";
      return kExitInput;
    }
    set_memory_limit(*v);
    cli::set_max_memory_given(*v);
  }
  CLI::App app{"assay " ASSAY_VERSION ": reference oracles, goldens and a differential gate for GPU kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("assay ") + ASSAY_VERSION);
  // A global option, also accepted after the subcommand (fallthrough): `assay gen --max-memory 8G`.
  app.fallthrough();
  app.add_option_function<int64_t>("--max-memory", [](const int64_t& b) {
    set_memory_limit(b);
    cli::set_max_memory_given(b);
  },
                                   "Refuse a tensor or dataset larger than this (bytes, or 512M / 8G; default: a quarter of RAM)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::PositiveNumber);
  cli::Common common;
  int rc = kExitPass;
  cli::add_gen(app, common, rc);
  cli::add_inspect(app, common, rc);
  cli::add_compare(app, common, rc);
  cli::add_verify(app, common, rc);
  cli::add_sanitize(app, common, rc);
  cli::add_calibrate(app, common, rc);
  cli::add_bisect(app, common, rc);
  // An unknown first word is named as such (CLI11 alone says "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const auto* sc : app.get_subcommands([](const CLI::App*) { return true; })) {
      found = found || sc->get_name() == argv[1];
      if (sc->get_name().rfind("__", 0) != 0) known += (known.empty() ? "" : ", ") + sc->get_name();
    }
    if (!found) {
      std::cerr << "assay: usage error: unknown subcommand '" << argv[1] << "' (" << known << ")\n";
      return kExitInput;
    }
  }
  // Every message may quote an input (a file name, an attribute, a field): printed through
  // printable(), one line, at most 2000 characters.
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "assay: usage error: " << printable(e.what()) << " (see assay --help)\n";
    return kExitInput;
  } catch (const InputError& e) {
    std::cerr << "assay: error: " << printable(e.what()) << "\n";
    return kExitInput;
  } catch (const OracleDisagreement& e) {
    std::cerr << "assay: oracle disagreement: " << printable(e.what()) << "\n";
    return kExitFail;
  } catch (const std::filesystem::filesystem_error& e) {  // a missing $TMPDIR, a path that is a file
    std::cerr << "assay: error: " << printable(e.what()) << "\n";
    return kExitInput;
  } catch (const std::exception& e) {
    std::cerr << "assay: internal error: " << printable(e.what()) << "\n";
    return kExitCouldNotRun;
  }
  // A report that did not reach standard output (a full disk, a closed pipe) is not a pass.
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::cerr << "assay: error: standard output: cannot write the report (disk full or closed?)\n";
    return kExitInput;
  }
  return rc;
}
