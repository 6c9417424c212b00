// Work planning of the runner: --shard parsing, kernel and case globs, finding the goldens, and
// the sorted, sharded (kernel, golden) list (plan_work).
#include "verify/run/runner.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "reference/core/check.h"

namespace assay {
namespace fs = std::filesystem;

// ---- selection ---------------------------------------------------------------------------------------

Shard Shard::parse(const std::string& s) {
  Shard sh;
  const auto p = s.find('/');
  try {
    if (p == std::string::npos) throw std::invalid_argument("");
    size_t e1 = 0, e2 = 0;
    sh.k = std::stoi(s.substr(0, p), &e1);
    sh.n = std::stoi(s.substr(p + 1), &e2);
    if (e1 != p || e2 != s.size() - p - 1) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw InputError(fmt::format("--shard '{}': expected k/n, e.g. 2/4", s));
  }
  if (sh.n < 1 || sh.k < 1 || sh.k > sh.n) throw InputError(fmt::format("--shard '{}': need 1 <= k <= n", s));
  return sh;
}

bool glob_match(const std::string& pattern, const std::string& s) { return ::fnmatch(pattern.c_str(), s.c_str(), 0) == 0; }

static bool any_match(const std::vector<std::string>& globs, const std::string& s) {
  if (globs.empty()) return true;
  for (const auto& g : globs)
    if (glob_match(g, s)) return true;
  return false;
}

std::vector<std::string> find_goldens(const std::string& dir, const std::vector<std::string>& ops) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) throw InputError(fmt::format("{}: golden directory not found", dir));
  for (const auto& d : fs::directory_iterator(dir)) {
    if (!d.is_directory()) continue;
    const auto op = d.path().filename().string();
    if (!ops.empty() && std::find(ops.begin(), ops.end(), op) == ops.end()) continue;
    for (const auto& f : fs::directory_iterator(d.path()))
      if (f.is_regular_file() && f.path().extension() == ".h5") out.push_back(f.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<WorkItem> plan_work(const std::vector<const kernels::KernelDef*>& ks, const std::vector<std::string>& goldens,
                                const std::vector<std::string>& kernel_globs, const std::vector<std::string>& case_globs,
                                const Shard& shard) {
  std::vector<WorkItem> all;
  for (const auto* k : ks) {
    if (!any_match(kernel_globs, k->name)) continue;
    for (const auto& g : goldens) {
      const fs::path p(g);
      const auto op = p.parent_path().filename().string();
      const auto cs = p.stem().string();
      if (op != k->op || !any_match(case_globs, cs)) continue;
      all.push_back({k, g, op, cs});
    }
  }
  std::sort(all.begin(), all.end(), [](const WorkItem& a, const WorkItem& b) {
    return std::tie(a.kernel->name, a.op, a.case_name) < std::tie(b.kernel->name, b.op, b.case_name);
  });
  std::vector<WorkItem> mine;
  for (size_t i = 0; i < all.size(); ++i)
    if (shard.takes(i)) mine.push_back(all[i]);
  return mine;
}

}  // namespace assay
