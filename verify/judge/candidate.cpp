#include "verify/judge/candidate.h"

#include <algorithm>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/judge/error_profile.h"

namespace assay {

static std::vector<double> read_values(const h5::File& f, const Output& o, const std::string& ds, const h5::DatasetInfo& inf);

std::vector<double> read_candidate(const h5::File& f, const Output& o, std::string_view group) {
  const auto& e = o.expected;
  std::string ds = fmt::format("/{}/{}", group, e.name);
  if (!f.exists(ds) && group == "outputs") ds = "/" + e.name;
  if (!f.exists(ds))
    throw InputError(fmt::format("{}: /{}/{}: missing dataset (the golden's {} '{}')", f.path(), group, e.name,
                                 group == "outputs" ? "output" : "intermediate", e.name));
  const auto inf = f.info(ds);
  // A sampled golden's output: the whole tensor (gathered at the sampled offsets) or the sampled
  // elements themselves (a candidate written for that golden).
  const bool whole = o.sampled && inf.shape == o.full_shape;
  if (inf.shape != e.shape && !whole)
    throw InputError(fmt::format("{}: {}: wrong shape {} (golden {} {}{})", f.path(), ds, shape_str(inf.shape), e.name,
                                 o.sampled ? shape_str(o.full_shape) : shape_str(e.shape),
                                 o.sampled ? fmt::format(", or its {} sampled elements", e.size()) : ""));
  auto v = read_values(f, o, ds, inf);
  if (!whole) return v;
  std::vector<double> g(o.sample_offsets.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = v[static_cast<size_t>(o.sample_offsets[i])];
  return g;
}

static std::vector<double> read_values(const h5::File& f, const Output& o, const std::string& ds, const h5::DatasetInfo& inf) {
  const auto& e = o.expected;
  if (f.has_attr(ds, "dtype")) {
    const auto s = f.attr_str(ds, "dtype");
    const auto d = parse_dtype(s);
    if (!d) throw InputError(fmt::format("{}: {}: unknown dtype '{}'", f.path(), ds, s));
    if (*d != e.dtype && *d != DType::f32 && *d != DType::f64)
      throw InputError(fmt::format("{}: {}: wrong dtype {} (golden output '{}' is {})", f.path(), ds, s, e.name, name(e.dtype)));
    // Integer storage of codes: of a float dtype (bf16 as int16, ...), or of an integer dtype in
    // storage of its own width whatever its signedness (the GPU worker writes every output as
    // unsigned codes: int64 -1 is 0xffff'ffff'ffff'ffff there, not 2^64 - 1).
    const bool same_width = static_cast<int>(inf.elem_size) == info(*d).storage_bytes;
    if (inf.is_integer && (info(*d).is_float || same_width)) {
      if (!same_width)
        throw InputError(fmt::format("{}: {}: {}-byte integers cannot hold {} codes", f.path(), ds, inf.elem_size, s));
      auto codes = f.read_u64(ds);
      if (inf.is_signed && inf.elem_size < 8)  // signed storage of codes: keep the stored bit pattern
        for (auto& c : codes) c &= (uint64_t{1} << (8 * inf.elem_size)) - 1;
      std::vector<double> v(codes.size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (info(*d).bits < 64 && (codes[i] >> info(*d).bits) != 0)
          throw InputError(fmt::format("{}: {}: element {} holds {:#x}, not a {} code", f.path(), ds, i, codes[i], s));
        v[i] = decode(*d, codes[i]);
      }
      return v;
    }
  }
  if (inf.is_integer && info(e.dtype).is_float)
    throw InputError(fmt::format("{}: {}: integer dataset for {} output '{}' needs a string attribute dtype naming its codes",
                                 f.path(), ds, name(e.dtype), e.name));
  return f.read_f64(ds);
}

void judge_intermediates(const Golden& g, const TolerancePolicy& policy, const h5::File& cand, CandidateResult& r,
                         const std::function<bool(const std::string&)>& selected,
                         const std::function<Tolerance(Tolerance)>& override_tol) {
  if (!cand.exists("/intermediates")) return;
  for (const auto& n : cand.list("/intermediates")) {
    if (selected && !selected(n)) continue;
    const auto io = g.intermediate_output(n);
    if (!io) {
      r.notes.push_back(fmt::format("intermediate '{}': the golden has no intermediate of that name: not judged", n));
      continue;
    }
    const DType dt = io->expected.dtype;
    auto tol = policy.lookup_named(g.prov.op, n, dt, r.profile);
    if (!tol) {
      r.notes.push_back(fmt::format("intermediate '{}' ({}): not judged: fixtures/{}.toml has no [[tolerance]] entry for it",
                                    n, name(dt), g.prov.op));
      continue;
    }
    if (tol->bound_k > 0 && !io->bound) {
      r.notes.push_back(fmt::format("intermediate '{}': not judged: its tolerance scales the golden's bound and this golden "
                                    "has none for it (regenerate it with this assay)", n));
      continue;
    }
    auto actual = read_candidate(cand, *io, "intermediates");
    r.reports.push_back(compare_tensor(*io, actual, override_tol ? override_tol(*tol) : *tol));
    r.reports.back().intermediate = true;
    attach_error_profile(r.reports.back(), *io, actual);
    r.actual.push_back(std::move(actual));
    if (r.reports.back().verdict != Verdict::Passed) r.verdict = Verdict::Incorrect;
  }
}

CandidateResult judge_candidate(const Golden& g, const TolerancePolicy& policy, const h5::File& cand,
                                const CandidateJudging& how) {
  CandidateResult r;
  r.profile = how.profile;
  if (cand.has_attr("/", "precision_profile")) {
    const auto p = cand.attr_str("/", "precision_profile");
    if (!r.profile.empty() && r.profile != p)
      throw InputError(fmt::format("{}: attribute precision_profile = '{}' but --profile {}: say one", cand.path(), p, r.profile));
    r.profile = p;
  }
  if (r.profile.empty()) r.profile = kStrictProfile;
  if (!g.sample.empty())
    r.notes.push_back("sampled golden: judged only " + sample_summary(g.sample) + " (golden/SCHEMA.md \"Sampled outputs\")");
  policy.require_profile(g.prov.op, r.profile, how.profile.empty() ? cand.path() + ": attribute precision_profile" : "--profile");
  const auto selected = [&](const std::string& n) {
    return how.outputs.empty() || std::find(how.outputs.begin(), how.outputs.end(), n) != how.outputs.end();
  };
  const auto override_tol = [&](Tolerance tol) {
    tol.exact = false;
    if (how.atol >= 0) tol.atol = how.atol;
    if (how.rtol >= 0) tol.rtol = how.rtol;
    tol.why = fmt::format("--atol/--rtol on the command line (bound_k {} and period {} kept from {})", tol.bound_k, tol.period,
                          tol.source);
    tol.source = "--atol/--rtol";
    return tol;
  };
  // Every selected output, and the scale a selected output is linked to (Output::scaled_by), is
  // read before any is judged: a code's verdict may depend on its block's scale (compare_output).
  std::vector<std::vector<double>> actual(g.outputs.size());
  const auto needed = [&](const Output& o) {
    if (selected(o.expected.name)) return true;
    for (const auto& u : g.outputs)
      if (selected(u.expected.name) && u.scaled_by == o.expected.name) return cand.exists("/outputs/" + o.expected.name);
    return false;
  };
  for (size_t k = 0; k < g.outputs.size(); ++k)
    if (needed(g.outputs[k])) actual[k] = read_candidate(cand, g.outputs[k]);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Output& out = g.outputs[k];
    if (!selected(out.expected.name)) continue;
    if (how.atol >= 0 || how.rtol >= 0) {
      const Tolerance t = override_tol(policy.lookup(g.prov.op, out.expected.name, out.expected.dtype, r.profile));
      r.reports.push_back(compare_output(policy, g.prov.op, g.outputs, k, actual, r.profile, &t));
    } else {
      r.reports.push_back(compare_output(policy, g.prov.op, g.outputs, k, actual, r.profile));
    }
    attach_error_profile(r.reports.back(), out, actual[k]);
    r.actual.push_back(actual[k]);
    if (r.reports.back().verdict != Verdict::Passed) r.verdict = Verdict::Incorrect;
  }
  judge_intermediates(g, policy, cand, r, selected, how.atol >= 0 || how.rtol >= 0 ? std::function<Tolerance(Tolerance)>(override_tol) : nullptr);
  if (r.reports.empty())
    throw InputError(fmt::format("{}: --output selects none of the golden's outputs", g.prov.op + "/" + g.prov.case_name));
  return r;
}

}  // namespace assay
