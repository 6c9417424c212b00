#include "verify/judge/tolerance.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "fixtures/gen/case.h"
#include "reference/core/check.h"

namespace assay {

Tolerance default_tolerance(DType t) {
  struct Row {
    DType dtype;
    double atol, rtol;
    const char* why;
  };
  static const Row kFloat[] = {
      {DType::f64, 1e-12, 1e-10, "fp64 kernels: reassociation only; 1e-10 leaves room for long reductions"},
      {DType::f32, 1e-6, 5e-6, "TransformerEngine getTolerances fp32 {1e-6, 5e-6}: a few fp32 ulps of reassociation"},
      {DType::f16, 1e-5, 1e-3, "fp16 output rounding is 2^-11 = 4.9e-4 relative; 1e-3 allows the rounding plus fp32 accumulation noise (TE, torch)"},
      {DType::bf16, 1e-5, 1.6e-2, "bf16 output rounding is 2^-8 = 3.9e-3 relative; torch.testing's bf16 rtol 1.6e-2 (about 4 rounding units)"},
      {DType::e4m3, 0, 0.0625, "an fp8 e4m3 output may differ from the fp64 truth by its own rounding: half an ulp = 2^-4 relative"},
      {DType::e5m2, 0, 0.125, "an fp8 e5m2 output may differ from the fp64 truth by its own rounding: half an ulp = 2^-3 relative"},
  };
  Tolerance r;
  r.source = fmt::format("default[{}]", name(t));
  for (const auto& row : kFloat)
    if (row.dtype == t) {
      r.atol = row.atol, r.rtol = row.rtol, r.why = row.why;
      return r;
    }
  r.exact = true;
  r.why = t == DType::e2m1 || t == DType::ue8m0 ? "quantized codes and scales have one right answer: compared bit-exactly"
                                                 : "integer outputs are exact";
  return r;
}

void TolerancePolicy::add_file(const std::string& path) { add_fixture(gen::load_fixture(path)); }

TolerancePolicy TolerancePolicy::for_fixture(const gen::Fixture& fx) {
  TolerancePolicy p;
  p.add_fixture(fx);
  return p;
}

void TolerancePolicy::add_fixture(const gen::Fixture& fx) {
  const toml::table& doc = fx.doc;
  const std::string& path = fx.path;
  const std::string& op = fx.op;
  const auto fname = std::filesystem::path(path).filename().string();
  if (const auto* pn = doc.get("profiles")) {
    const auto* pt = pn->as_table();
    if (!pt) throw InputError(fmt::format("{}: [profiles]: expected a table of name = \"why\"", path));
    for (const auto& [k, v] : *pt) {
      const auto why = v.value<std::string>();
      if (!why || why->empty())
        throw InputError(fmt::format("{}: [profiles] field '{}': must be a string saying how such a kernel computes", path, k.str()));
      if (k.str() == kStrictProfile)
        throw InputError(fmt::format("{}: [profiles] field 'strict': the default profile is implicit", path));
      profiles_.push_back({op, std::string(k.str()), *why});
    }
  }
  const auto* arr = doc["tolerance"].as_array();
  if (!arr) return;
  int idx = 0;
  for (const auto& n : *arr) {
    ++idx;
    const auto where = fmt::format("{}: [[tolerance]] #{}", path, idx);
    const auto* t = n.as_table();
    if (!t) throw InputError(where + ": not a table");
    Entry e;
    e.op = op;
    e.output = (*t)["output"].value<std::string>().value_or("");
    if (e.output.empty()) throw InputError(where + ": field 'output': missing (a tensor name or \"*\")");
    auto ds = (*t)["dtype"].value<std::string>();
    auto d = ds ? parse_dtype(*ds) : std::nullopt;
    if (!d) throw InputError(where + ": field 'dtype': missing or unknown");
    e.dtype = *d;
    e.tol = default_tolerance(*d);
    e.tol.exact = (*t)["exact"].value<bool>().value_or(false);
    e.tol.atol = (*t)["atol"].value<double>().value_or(0.0);
    e.tol.rtol = (*t)["rtol"].value<double>().value_or(0.0);
    e.tol.bound_k = (*t)["bound_k"].value<double>().value_or(0.0);
    e.tol.bound2_k = (*t)["bound2_k"].value<double>().value_or(0.0);
    e.tol.max_mismatch = (*t)["max_mismatch"].value<int64_t>().value_or(0);
    e.tol.period = (*t)["period"].value<double>().value_or(0.0);
    e.tol.why = (*t)["why"].value<std::string>().value_or("");
    e.profile = (*t)["profile"].value<std::string>().value_or(kStrictProfile);
    if (!has_profile(op, e.profile))
      throw InputError(fmt::format("{}: field 'profile': '{}' is not declared under [profiles]", where, e.profile));
    e.tol.profile = e.profile;
    e.index = idx;
    if (e.tol.why.empty()) throw InputError(where + ": field 'why': every tolerance entry must say why");
    if (e.tol.atol < 0 || e.tol.rtol < 0 || e.tol.bound_k < 0 || e.tol.bound2_k < 0 || e.tol.max_mismatch < 0 || e.tol.period < 0)
      throw InputError(where + ": atol, rtol, bound_k, bound2_k, max_mismatch and period must be >= 0");
    for (const auto& [k, v] : *t) {
      (void)v;
      static const std::set<std::string, std::less<>> known{"output", "dtype", "exact", "atol", "rtol", "bound_k", "bound2_k",
                                                           "max_mismatch", "period", "why", "profile"};
      if (!known.count(k.str())) throw InputError(fmt::format("{}: field '{}': unknown", where, k.str()));
    }
    e.tol.source = fmt::format("{} [[tolerance]] #{}", fname, idx);
    for (const auto& o : entries_)
      if (o.op == e.op && o.output == e.output && o.dtype == e.dtype && o.profile == e.profile)
        throw InputError(fmt::format("{}: duplicate entry for output '{}' dtype {} profile {}", where, e.output,
                                     name(e.dtype), e.profile));
    entries_.push_back(std::move(e));
  }
}

TolerancePolicy TolerancePolicy::load(const std::string& dir) {
  TolerancePolicy p;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return p;
  std::vector<std::string> files;
  for (const auto& de : std::filesystem::directory_iterator(dir))
    if (de.path().extension() == ".toml") files.push_back(de.path().string());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) p.add_file(f);
  return p;
}

TolerancePolicy TolerancePolicy::for_ops(const std::string& fixtures_dir, const std::vector<std::string>& ops) {
  TolerancePolicy p;
  if (fixtures_dir.empty()) return p;
  for (const auto& op : ops) {
    const auto f = std::filesystem::path(fixtures_dir) / (op + ".toml");
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec))
      throw InputError(fmt::format("{}: no fixture for op '{}'; give --fixtures DIR or set $ASSAY_FIXTURES", f.string(), op));
    if (std::none_of(p.profiles_.begin(), p.profiles_.end(), [&](const Profile& x) { return x.op == op; }) &&
        std::none_of(p.entries_.begin(), p.entries_.end(), [&](const Entry& e) { return e.op == op; }))
      p.add_file(f.string());
  }
  return p;
}

bool TolerancePolicy::has_profile(std::string_view op, std::string_view profile) const {
  return profile == kStrictProfile || find_profile(op, profile) != nullptr;
}

const TolerancePolicy::Profile* TolerancePolicy::find_profile(std::string_view op, std::string_view profile) const {
  for (const auto& p : profiles_)
    if (p.op == op && p.name == profile) return &p;
  return nullptr;
}

std::vector<std::string> TolerancePolicy::profiles(std::string_view op) const {
  std::vector<std::string> r{kStrictProfile};
  for (const auto& p : profiles_)
    if (p.op == op) r.push_back(p.name);
  return r;
}

void TolerancePolicy::require_profile(std::string_view op, std::string_view profile, std::string_view where) const {
  if (has_profile(op, profile)) return;
  std::string known;
  for (const auto& p : profiles(op)) known += (known.empty() ? "" : ", ") + p;
  throw InputError(fmt::format("{}: precision profile '{}' is not one of op {}'s profiles ({})", where, profile, op, known));
}

namespace {

// The entry for (op, output or "*", dtype) under exactly `prof`; nullptr: none.
const TolerancePolicy::Entry* find_entry(const std::vector<TolerancePolicy::Entry>& entries, std::string_view op,
                                         std::string_view output, DType dtype, std::string_view prof, bool star) {
  for (const auto& e : entries)
    if (e.op == op && e.output == output && e.dtype == dtype && e.profile == prof) return &e;
  if (star)
    for (const auto& e : entries)
      if (e.op == op && e.output == "*" && e.dtype == dtype && e.profile == prof) return &e;
  return nullptr;
}

}  // namespace

Tolerance at_least_strict(const Tolerance& p, const Tolerance& strict) {
  if (p.exact != strict.exact || p.period != strict.period)
    throw InputError(fmt::format("{} (profile {}): a profile entry must compare as strict's {} does ({} vs {}): a "
                                 "profile adds roundings to strict's error model, it cannot change what is compared",
                                 p.source, p.profile, strict.source,
                                 p.exact ? "exact codes" : p.period > 0 ? "circular distance" : "values",
                                 strict.exact ? "exact codes" : strict.period > 0 ? "circular distance" : "values"));
  Tolerance r = p;
  r.atol = std::max(p.atol, strict.atol);
  r.rtol = std::max(p.rtol, strict.rtol);
  r.bound_k = std::max(p.bound_k, strict.bound_k);
  r.bound2_k = std::max(p.bound2_k, strict.bound2_k);
  r.max_mismatch = std::max(p.max_mismatch, strict.max_mismatch);
  if (r.atol != p.atol || r.rtol != p.rtol || r.bound_k != p.bound_k || r.bound2_k != p.bound2_k ||
      r.max_mismatch != p.max_mismatch)
    r.source = fmt::format("{}, at least {}", p.source, strict.source);
  return r;
}

Tolerance TolerancePolicy::lookup(std::string_view op, std::string_view output, DType dtype,
                                  std::string_view profile) const {
  require_profile(op, profile, "tolerance lookup");
  const Entry* s = find_entry(entries_, op, output, dtype, kStrictProfile, true);
  Tolerance strict = s ? s->tol : default_tolerance(dtype);
  if (profile == kStrictProfile) return strict;
  // The profile's own entry, widened to strict's wherever strict allows more: a profile names
  // extra roundings on top of strict, so no element may be allowed less under it.
  if (const Entry* p = find_entry(entries_, op, output, dtype, profile, true)) return at_least_strict(p->tol, strict);
  return strict;
}

std::optional<Tolerance> TolerancePolicy::lookup_named(std::string_view op, std::string_view output, DType dtype,
                                                      std::string_view profile) const {
  require_profile(op, profile, "tolerance lookup");
  const Entry* s = find_entry(entries_, op, output, dtype, kStrictProfile, false);
  const Entry* p = profile == kStrictProfile ? nullptr : find_entry(entries_, op, output, dtype, profile, false);
  if (p && s) return at_least_strict(p->tol, s->tol);
  if (p) return p->tol;
  if (s) return s->tol;
  return std::nullopt;
}

}  // namespace assay
