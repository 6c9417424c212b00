#include "verify/bisect/bisect.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "fixtures/gen/inputs.h"
#include "verify/judge/compare.h"
#include "verify/io/safe_files.h"
#include "verify/io/h5.h"
#include "verify/judge/error_profile.h"

namespace assay {
namespace {

std::string ratio_str(double r) { return std::isinf(r) ? std::string("inf") : fmt::format("{:.3g}", r); }

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

bool is_walk_axis(const std::string& a) { return a == "chunk" || a == "C" || a == "NC" || a == "S" || a == "split"; }

// Intermediate `tr` walked along its walk axis (the first of chunk / C / NC / S / split it has).
BisectStage walk_stage(const Output& io, const TensorReport& tr, const std::vector<double>& actual) {
  BisectStage st;
  st.name = tr.name;
  st.max_ratio = tr.max_ratio;
  st.tolerance_source = tr.tol.source;
  st.bad = tr.verdict != Verdict::Passed;
  const Tensor& e = io.expected;
  for (size_t d = 0; d < e.axes.size(); ++d)
    if (is_walk_axis(e.axes[d])) {
      st.walk_axis = e.axes[d], st.walk_dim = static_cast<int>(d), st.walk_len = e.shape[d];
      break;
    }
  int64_t inner = 1;  // elements per step of the walk axis
  for (size_t d = static_cast<size_t>(std::max(st.walk_dim + 1, 0)); d < e.shape.size() && st.walk_dim >= 0; ++d) inner *= e.shape[d];
  std::vector<double> ratio(static_cast<size_t>(st.walk_len), 0.0);
  std::vector<int64_t> first_flat(static_cast<size_t>(st.walk_len), -1);
  for (size_t i = 0; i < actual.size(); ++i) {
    const auto c = check_element(io, tr.tol, i, actual[i]);
    const int64_t w = st.walk_dim < 0 ? 0 : (static_cast<int64_t>(i) / inner) % st.walk_len;
    auto& rw = ratio[static_cast<size_t>(w)];
    rw = std::max(rw, c.bad && !(c.ratio > 1) ? std::numeric_limits<double>::infinity() : c.ratio);
    if (c.bad && first_flat[static_cast<size_t>(w)] < 0) first_flat[static_cast<size_t>(w)] = static_cast<int64_t>(i);
  }
  for (int64_t w = 0; w < st.walk_len; ++w) {
    if (first_flat[static_cast<size_t>(w)] < 0) {
      st.before_ratio = std::max(st.before_ratio, ratio[static_cast<size_t>(w)]);
      continue;
    }
    st.bad = true;
    st.first_bad = w;
    st.first_bad_index = e.index_str(first_flat[static_cast<size_t>(w)]);
    st.first_bad_ratio = ratio[static_cast<size_t>(w)];
    break;
  }
  return st;
}

}  // namespace

std::string BisectStage::label(int64_t i) const {
  if (walk_axis == "S") return fmt::format("step {}", i + 1);
  if (walk_axis == "split") return fmt::format("split {}", i);
  if (walk_axis.empty()) return "the whole tensor";
  return fmt::format("chunk {}", i);
}

bool BisectReport::any_bad() const {
  return std::any_of(outputs.begin(), outputs.end(), [](const BisectOutput& o) { return o.bad; }) ||
         std::any_of(stages.begin(), stages.end(), [](const BisectStage& s) { return s.bad; });
}

const BisectStage* BisectReport::first_bad_stage() const {
  return !stages.empty() && stages.front().bad && stages.front().first_bad >= 0 ? &stages.front() : nullptr;
}

BisectReport bisect_candidate(const Golden& g, const TolerancePolicy& policy, const h5::File& cand,
                              const CandidateJudging& how) {
  BisectReport r;
  r.judged = judge_candidate(g, policy, cand, how);  // profile, tolerances and values, as compare
  const auto& res = r.judged;
  r.op = g.prov.op;
  r.case_name = g.prov.case_name;
  r.profile = res.profile;
  r.notes = res.notes;
  const int64_t chunk_size = g.case_fields.has("chunk_size") ? g.case_fields.get_int("chunk_size") : 0;
  for (size_t k = 0; k < res.reports.size(); ++k) {
    const auto& tr = res.reports[k];
    if (tr.intermediate) {
      r.stages.push_back(walk_stage(*g.intermediate_output(tr.name), tr, res.actual[k]));
      continue;
    }
    const Output& out = *g.output(tr.name);
    const auto p = error_profile(out, tr.tol, res.actual[k], std::numeric_limits<int64_t>::max());
    BisectOutput b;
    b.name = tr.name;
    b.backward = tr.name.size() > 1 && tr.name[0] == 'd' && g.input(tr.name.substr(1)) != nullptr;
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
    if (a.backward != b.backward) return !a.backward;  // the forward before the backward
    const auto pa = a.first_bad_pos < 0 ? std::numeric_limits<int64_t>::max() : a.first_bad_pos;
    const auto pb = b.first_bad_pos < 0 ? std::numeric_limits<int64_t>::max() : b.first_bad_pos;
    return pa < pb;
  });
  // Bad ones first, by walk index; one wrong only as a whole (a never-pass rule, first_bad -1) after those.
  std::stable_sort(r.stages.begin(), r.stages.end(), [](const BisectStage& a, const BisectStage& b) {
    if (a.bad != b.bad) return a.bad;
    const auto ka = a.first_bad < 0 ? std::numeric_limits<int64_t>::max() : a.first_bad;
    const auto kb = b.first_bad < 0 ? std::numeric_limits<int64_t>::max() : b.first_bad;
    return ka < kb;
  });
  return r;
}

std::string BisectReport::text() const {
  std::string s = fmt::format("{}/{} (profile {}): ", op, case_name, profile);
  if (!any_bad()) {
    double m = 0;
    for (const auto& o : outputs) m = std::max(m, o.max_ratio);
    for (const auto& o : stages) m = std::max(m, o.max_ratio);
    s += fmt::format("every output{} within tolerance (max {}x allowed): nothing to bisect\n",
                     stages.empty() ? "" : " and intermediate", ratio_str(m));
    for (const auto& n : notes) s += "  note: " + n + "\n";
    return s;
  }
  const BisectOutput* first_out = nullptr;
  for (const auto& o : outputs)
    if (o.bad && o.first_bad_pos >= 0 && !first_out) first_out = &o;
  if (!stages.empty()) {
    s += "walking the intermediates in dependency order, then the outputs\n";
    if (const BisectStage* b = first_bad_stage()) {
      s += fmt::format("  first bad: {}{} at {} ({}x allowed)\n", b->name, b->first_bad_index, b->label(b->first_bad),
                       ratio_str(b->first_bad_ratio));
      if (b->first_bad > 0)
        s += fmt::format("    {}..{} within {}x allowed\n", b->label(0), b->label(b->first_bad - 1), ratio_str(b->before_ratio));
      else if (b->walk_dim >= 0)
        s += fmt::format("    already wrong at {}\n", b->label(0));
      if (first_out) {
        s += fmt::format("    outputs first wrong at {}={}", first_out->seq_axis, first_out->first_bad_pos);
        if (first_out->chunk >= 0)
          s += fmt::format(" = chunk {} x {} + {}", first_out->chunk, first_out->chunk_size,
                           first_out->first_bad_pos - first_out->chunk * first_out->chunk_size);
        s += fmt::format(" ({}{})\n", first_out->name, first_out->first_bad_index);
      }
      s += fmt::format("    tolerance: {}\n", b->tolerance_source);
    } else if (stages.front().bad) {  // wrong only as a whole: no walk step to name (listed below)
      s += "  first bad: no single step: the intermediates below are wrong as a whole\n";
    } else {
      const bool split = std::any_of(stages.begin(), stages.end(), [](const BisectStage& t) { return t.walk_axis == "split"; });
      double m = 0;
      for (const auto& t : stages) m = std::max(m, t.max_ratio);
      s += fmt::format("  first bad: {}: every intermediate within tolerance (max {}x allowed) but the outputs are not\n",
                       split ? "the combine of the splits" : "after the last walked intermediate", ratio_str(m));
    }
    for (const auto& t : stages)
      if (t.bad && t.first_bad < 0)
        s += fmt::format("  also bad: {} as a whole (a never-pass rule: all zero, constant, or NaN/Inf where the golden is "
                         "finite)\n", t.name);
      else if (&t != first_bad_stage())
        s += t.bad ? fmt::format("  also bad: {}{} at {} ({}x allowed)\n", t.name, t.first_bad_index, t.label(t.first_bad),
                                 ratio_str(t.first_bad_ratio))
                   : fmt::format("  {}: within tolerance (max {}x allowed)\n", t.name, ratio_str(t.max_ratio));
    for (const auto& n : notes) s += "  note: " + n + "\n";
    if (!repro_golden.empty())
      s += fmt::format("  repro bundle: assay compare {} {}\n", repro_golden, repro_candidate);
    s += "outputs:\n";
  } else {
    s += "walking the outputs along their sequence axis (the candidate has no intermediates to walk)\n";
    for (const auto& n : notes) s += "  note: " + n + "\n";
  }
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
    s += fmt::format("  {}first bad: {}{} at {}={} of {} ({}x allowed at {})", first ? "" : "also ", o.name,
                     o.backward ? " (backward)" : "", o.seq_axis,
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
  nlohmann::json j{{"op", op},         {"case", case_name},
                   {"profile", profile}, {"found", any_bad()},
                   {"walked", stages.empty() ? "outputs" : "intermediates"}, {"notes", notes}};
  j["intermediates"] = nlohmann::json::array();
  for (const auto& t : stages)
    j["intermediates"].push_back({{"name", t.name}, {"bad", t.bad}, {"walk_axis", t.walk_axis}, {"walk_len", t.walk_len},
                                  {"first_bad", t.first_bad}, {"first_bad_label", t.bad ? t.label(t.first_bad) : ""},
                                  {"first_bad_index", t.first_bad_index}, {"first_bad_ratio", finite_or_null(t.first_bad_ratio)},
                                  {"before_ratio", finite_or_null(t.before_ratio)}, {"max_ratio", finite_or_null(t.max_ratio)},
                                  {"tolerance", t.tolerance_source}});
  if (!repro_golden.empty()) j["repro"] = {{"golden", repro_golden}, {"candidate", repro_candidate}};
  j["outputs"] = nlohmann::json::array();
  for (const auto& o : outputs)
    j["outputs"].push_back({{"name", o.name}, {"bad", o.bad}, {"backward", o.backward}, {"seq_axis", o.seq_axis}, {"seq_len", o.seq_len},
                            {"first_bad_pos", o.first_bad_pos}, {"first_bad_index", o.first_bad_index},
                            {"first_bad_ratio", finite_or_null(o.first_bad_ratio)}, {"before_ratio", finite_or_null(o.before_ratio)},
                            {"chunk", o.chunk}, {"chunk_size", o.chunk_size}, {"max_ratio", finite_or_null(o.max_ratio)},
                            {"worst_cells", o.worst_cells}, {"tolerance", o.tolerance_source}});
  return j;
}

// ---- the repro bundle ---------------------------------------------------------------------------------

namespace {

// Rows [lo, hi) of dimension d of a row-major array of shape sh.
template <class T>
std::vector<T> slice_dim(const Shape& sh, size_t d, int64_t lo, int64_t hi, const std::vector<T>& v) {
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= sh[i];
  for (size_t i = d + 1; i < sh.size(); ++i) inner *= sh[i];
  std::vector<T> r;
  r.reserve(static_cast<size_t>(outer * (hi - lo) * inner));
  for (int64_t o = 0; o < outer; ++o)
    r.insert(r.end(), v.begin() + (o * sh[d] + lo) * inner, v.begin() + (o * sh[d] + hi) * inner);
  return r;
}

Tensor slice_tensor(const Tensor& t, size_t d, int64_t lo, int64_t hi) {
  Tensor r = t;
  r.data = slice_dim(t.shape, d, lo, hi, t.data);
  r.shape[d] = hi - lo;
  return r;
}

Output slice_output(const Output& o, size_t d, int64_t lo, int64_t hi) {
  Output r = o;
  const Shape& sh = o.expected.shape;
  r.expected = slice_tensor(o.expected, d, lo, hi);
  if (o.bound) r.bound = slice_dim(sh, d, lo, hi, *o.bound);
  if (o.bound2) r.bound2 = slice_dim(sh, d, lo, hi, *o.bound2);
  if (o.rounded) r.rounded = slice_dim(sh, d, lo, hi, *o.rounded);
  if (o.allowed_mask) r.allowed_mask = slice_dim(sh, d, lo, hi, *o.allowed_mask);
  if (o.alt) r.alt = slice_dim(sh, d, lo, hi, *o.alt);
  r.allow_nonfinite = std::any_of(r.expected.data.begin(), r.expected.data.end(), [](double x) { return !std::isfinite(x); });
  return r;
}

int dim_of(const Tensor& t, std::initializer_list<const char*> names) {
  for (size_t d = 0; d < t.axes.size(); ++d)
    for (const char* n : names)
      if (t.axes[d] == n) return static_cast<int>(d);
  return -1;
}

}  // namespace

bool write_bisect_bundle(const Golden& g, BisectReport& r, const std::string& prefix) {
  const BisectStage* b = r.first_bad_stage();
  if (!b || b->walk_dim < 0) return false;
  const int64_t k = b->first_bad, k0 = std::max<int64_t>(0, k - 1);
  Golden d;
  d.prov = g.prov;
  d.prov.level = "bisect";
  d.prov.generator = fmt::format("assay bisect: {} {}..{} of {}/{} (a slice: not regenerated from the fixture)", b->name,
                                 b->label(k0), b->label(k), g.prov.op, g.prov.case_name);
  d.case_fields = g.case_fields;
  // The tokens (scans) or steps (optimizers) the slice covers: the walk step k0 -> k and the one after.
  const bool chunked = b->walk_axis == "chunk" || b->walk_axis == "C" || b->walk_axis == "NC";
  int64_t t_lo = -1, t_hi = -1;
  const bool varlen = g.input("cu_seqlens") || g.input("seqlens");
  if (chunked && g.case_fields.has("chunk_size") && !varlen) {
    const int64_t Q = g.case_fields.get_int("chunk_size");
    const Tensor* starts = g.intermediate("chunk_start");
    t_lo = starts ? static_cast<int64_t>(starts->data.at(static_cast<size_t>(k0))) : k0 * Q;
    t_hi = starts && k + 1 < starts->size() ? static_cast<int64_t>(starts->data[static_cast<size_t>(k + 1)]) : (k + 1) * Q;
  }
  std::vector<std::vector<double>> actual;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Tensor& t = g.inputs[i];
    const int td = t_lo >= 0 ? dim_of(t, {"T", "L"}) : b->walk_axis == "S" ? dim_of(t, {"S"}) : -1;
    if (td < 0) {
      d.inputs.push_back(t), d.input_hashes.push_back(g.input_hashes[i]);
      continue;
    }
    const int64_t lo = t_lo >= 0 ? t_lo : k0, hi = std::min(t_lo >= 0 ? t_hi : k + 1, t.shape[static_cast<size_t>(td)]);
    d.inputs.push_back(slice_tensor(t, static_cast<size_t>(td), lo, hi));
    d.input_hashes.push_back(gen::input_hash(d.inputs.back()));
  }
  const auto& res = r.judged;
  for (size_t i = 0; i < res.reports.size(); ++i) {
    const auto& tr = res.reports[i];
    if (tr.intermediate && tr.name == b->name) {
      const auto io = g.intermediate_output(tr.name);
      const auto dim = static_cast<size_t>(b->walk_dim);
      d.outputs.push_back(slice_output(*io, dim, k0, k + 1));
      actual.push_back(slice_dim(io->expected.shape, dim, k0, k + 1, res.actual[i]));
    } else if (!tr.intermediate && t_lo >= 0) {
      const Output& o = *g.output(tr.name);
      const int td = dim_of(o.expected, {"T", "L"});
      if (td < 0) continue;  // final states: not of these chunks
      const int64_t hi = std::min(t_hi, o.expected.shape[static_cast<size_t>(td)]);
      d.outputs.push_back(slice_output(o, static_cast<size_t>(td), t_lo, hi));
      actual.push_back(slice_dim(o.expected.shape, static_cast<size_t>(td), t_lo, hi, res.actual[i]));
    } else {
      continue;
    }
    d.single_form[d.outputs.back().expected.name] = "a slice cut by assay bisect from the full golden";
  }
  const std::string gpath = prefix + ".golden.h5", cpath = prefix + ".candidate.h5";
  check_output_path(gpath, "--repro");
  check_output_path(cpath, "--repro");
  write_golden(gpath, d);
  const std::string tmp = fmt::format("{}.tmp.{}", cpath, static_cast<long>(::getpid()));
  {
    auto f = h5::File::create(tmp);
    f.create_group("/outputs");
    for (size_t i = 0; i < d.outputs.size(); ++i)
      f.write("/outputs/" + d.outputs[i].expected.name, h5::Elem::f64, d.outputs[i].expected.shape, actual[i].data());
    f.set_attr("/", "precision_profile", r.profile);
  }
  std::filesystem::rename(tmp, cpath);
  r.repro_golden = gpath, r.repro_candidate = cpath;
  return true;
}

}  // namespace assay
