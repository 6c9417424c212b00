// Helpers for tests that run the assay binary as a separate process.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "catch_compat.h"
#include "reference/core/dtype.h"
#include "tests/common.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"

namespace assay_test {

struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line, stdout and stderr together.
inline Run run_shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// Runs `<ASSAY_EXE> args` (prefixed by `env_prefix`, e.g. "env CUDA_VISIBLE_DEVICES= ").
inline Run run_assay(const std::string& args, const std::string& env_prefix = "") {
  return run_shell(env_prefix + std::string(ASSAY_EXE) + " " + args);
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// How the HTML report (verify/report/report_html.cpp) escapes text: & < > ".
inline std::string html_escaped(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

// The number of lines of s (its newlines).
inline int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// A candidate holding the golden's outputs rounded to their dtypes, each transformed by f(value,
// index), stored as float32 like torch would write it.
inline void write_candidate(const std::filesystem::path& path, const assay::Golden& g, double (*f)(double, size_t)) {
  auto h = assay::h5::File::create(path.string());
  h.create_group("/outputs");
  for (const auto& o : g.outputs) {
    std::vector<float> v(o.expected.data.size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(f(assay::round_to(o.expected.dtype, o.expected.data[i]), i));
    h.write("/outputs/" + o.expected.name, assay::h5::Elem::f32, o.expected.shape, v.data());
  }
}

// What the CLI test files (test_cli*.cpp) use, by `using namespace assay_test::cli`.
namespace cli {
using assay_test::lines;
using assay_test::Run;
using assay_test::slurp;
using assay_test::write_candidate;
inline Run run(const std::string& args) { return run_assay(args); }
inline std::filesystem::path tmpdir(const std::string& name) { return fresh_dir("assay_test_cli", name); }
inline const std::string kGolden = std::string(ASSAY_SOURCE_DIR) + "/golden/scaled_add/normal_odd_shape.h5";
}  // namespace cli

}  // namespace assay_test
