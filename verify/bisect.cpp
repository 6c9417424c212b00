#include "verify/bisect.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "verify/error_profile.h"

namespace assay {
namespace {

std::string ratio_str(double r) { return std::isinf(r) ? std::string("inf") : fmt::format("{:.3g}", r); }

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

bool BisectReport::any_bad() const {
  return std::any_of(outputs.begin(), outputs.end(), [](const BisectOutput& o) { return o.bad; });
}

BisectReport bisect_candidate(const Golden& g, const TolerancePolicy& policy, const h5::File& cand,
                              const CandidateJudging& how) {
  const auto res = judge_candidate(g, policy, cand, how);  // profile, tolerances and values, as compare
  BisectReport r;
  r.op = g.prov.op;
  r.case_name = g.prov.case_name;
  r.profile = res.profile;
  const int64_t chunk_size = g.case_fields.has("chunk_size") ? g.case_fields.get_int("chunk_size") : 0;
  for (size_t k = 0; k < res.reports.size(); ++k) {
    const auto& tr = res.reports[k];
    const Output& out = *g.output(tr.name);
    const auto p = error_profile(out, tr.tol, res.actual[k], std::numeric_limits<int64_t>::max());
    BisectOutput b;
    b.name = tr.name;
    b.seq_axis = p.seq_axis;
    b.seq_len = p.seq_len;
    b.max_ratio = tr.max_ratio;
    b.tolerance_source = tr.tol.source;
    // A never-pass rule (all zero, constant) is a whole-tensor failure with no position.
    b.bad = tr.verdict != Verdict::Passed;
    if (p.first_bad_pos >= 0) {
      b.first_bad_pos = p.first_bad_pos;
      b.first_bad_index = out.expected.index_str(p.first_bad_flat);
      b.first_bad_ratio = p.seq_max_ratio[static_cast<size_t>(p.first_bad_pos)];
      for (int64_t t = 0; t < p.first_bad_pos; ++t) b.before_ratio = std::max(b.before_ratio, p.seq_max_ratio[static_cast<size_t>(t)]);
      const bool seq_is_time = p.seq_axis == "T" || p.seq_axis == "L";
      if (chunk_size > 0 && seq_is_time) b.chunk = p.first_bad_pos / chunk_size, b.chunk_size = chunk_size;
    }
    // The worst (batch·head, tile) cells out of tolerance.
    std::vector<size_t> cells;
    for (size_t c = 0; c < p.heat.size(); ++c)
      if (p.heat[c] > 1) cells.push_back(c);
    std::stable_sort(cells.begin(), cells.end(), [&](size_t a, size_t c) { return p.heat[a] > p.heat[c]; });
    for (size_t j = 0; j < cells.size() && j < 3; ++j) {
      const auto row = static_cast<int64_t>(cells[j]) / p.cols, col = static_cast<int64_t>(cells[j]) % p.cols;
      b.worst_cells.push_back(fmt::format("[{}={}, {} {}..{}]: {}x", p.row_axes.empty() ? "row" : p.row_axes, row * p.row_bin,
                                          p.seq_axis, col * p.tile, std::min((col + 1) * p.tile, p.seq_len) - 1,
                                          ratio_str(p.heat[cells[j]])));
    }
    r.outputs.push_back(std::move(b));
  }
  std::stable_sort(r.outputs.begin(), r.outputs.end(), [](const BisectOutput& a, const BisectOutput& b) {
    if (a.bad != b.bad) return a.bad;
    const auto pa = a.first_bad_pos < 0 ? std::numeric_limits<int64_t>::max() : a.first_bad_pos;
    const auto pb = b.first_bad_pos < 0 ? std::numeric_limits<int64_t>::max() : b.first_bad_pos;
    return pa < pb;
  });
  return r;
}

std::string BisectReport::text() const {
  std::string s = fmt::format("{}/{} (profile {}): ", op, case_name, profile);
  if (!any_bad()) {
    double m = 0;
    for (const auto& o : outputs) m = std::max(m, o.max_ratio);
    return s + fmt::format("every output within tolerance (max {}x allowed): nothing to bisect\n", ratio_str(m));
  }
  s += "walking the outputs along their sequence axis (the candidate has no intermediates to walk)\n";
  bool first = true;
  for (const auto& o : outputs) {
    if (!o.bad) {
      s += fmt::format("  {}: within tolerance (max {}x allowed)\n", o.name, ratio_str(o.max_ratio));
      continue;
    }
    if (o.first_bad_pos < 0) {
      s += fmt::format("  {}: wrong as a whole (a never-pass rule: all zero, constant, or NaN/Inf where the golden is finite)\n", o.name);
      continue;
    }
    s += fmt::format("  {}first bad: {} at {}={} of {} ({}x allowed at {})", first ? "" : "also ", o.name, o.seq_axis,
                     o.first_bad_pos, o.seq_len, ratio_str(o.first_bad_ratio), o.first_bad_index);
    if (o.chunk >= 0) s += fmt::format(" = chunk {} x {} + {}", o.chunk, o.chunk_size, o.first_bad_pos - o.chunk * o.chunk_size);
    s += "\n";
    if (o.first_bad_pos > 0)
      s += fmt::format("    {} 0..{} within {}x allowed{}\n", o.seq_axis, o.first_bad_pos - 1, ratio_str(o.before_ratio),
                       o.chunk > 0 ? fmt::format(" (chunks 0..{})", o.chunk - 1) : "");
    else
      s += fmt::format("    already wrong at {} 0\n", o.seq_axis);
    for (const auto& c : o.worst_cells) s += "    worst cell " + c + "\n";
    s += fmt::format("    tolerance: {}\n", o.tolerance_source);
    first = false;
  }
  return s;
}

nlohmann::json BisectReport::json() const {
  nlohmann::json j{{"op", op}, {"case", case_name}, {"profile", profile}, {"found", any_bad()}, {"walked", "outputs"}};
  j["outputs"] = nlohmann::json::array();
  for (const auto& o : outputs)
    j["outputs"].push_back({{"name", o.name}, {"bad", o.bad}, {"seq_axis", o.seq_axis}, {"seq_len", o.seq_len},
                            {"first_bad_pos", o.first_bad_pos}, {"first_bad_index", o.first_bad_index},
                            {"first_bad_ratio", finite_or_null(o.first_bad_ratio)}, {"before_ratio", finite_or_null(o.before_ratio)},
                            {"chunk", o.chunk}, {"chunk_size", o.chunk_size}, {"max_ratio", finite_or_null(o.max_ratio)},
                            {"worst_cells", o.worst_cells}, {"tolerance", o.tolerance_source}});
  return j;
}

}  // namespace assay
