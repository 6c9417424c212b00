#include "verify/calibrate/calibrate.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fnmatch.h>

#include "fixtures/gen/case.h"
#include "fixtures/gen/op.h"
#include "reference/core/check.h"
#include "verify/calibrate/baselines.h"
#include "verify/judge/compare.h"
#include "verify/io/golden.h"
#include "verify/io/stale.h"
#include "verify/judge/tolerance.h"

namespace assay {
namespace fs = std::filesystem;

bool OpCalibration::ok() const {
  if (!problems.empty()) return false;
  for (const auto& v : variants)
    if (!v.problems.empty()) return false;
  return true;
}

bool CalibrationReport::ok() const {
  return std::all_of(ops.begin(), ops.end(), [](const OpCalibration& o) { return o.ok(); });
}

namespace {

std::string ratio_str(double r) {
  if (std::isinf(r)) return "inf";
  if (r >= 100) return fmt::format("{:.0f}", r);
  if (r >= 10) return fmt::format("{:.1f}", r);
  return fmt::format("{:.3f}", r);
}

// The variant's values as the kernel's store leaves them: rounded to the output dtype.
std::vector<double> stored(DType t, std::vector<double> v) {
  if (info(t).is_float)
    for (auto& x : v) x = round_to(t, x);
  return v;
}

struct CaseWork {
  const gen::Case* c = nullptr;
  std::string golden_path;
  std::vector<CalibrationCell> cells;  // per variant x judged profile
  std::vector<std::string> problems;
  std::vector<std::pair<std::string, DType>> outputs;  // (name, dtype) of the golden's outputs and intermediates
  std::vector<std::string> lint;
};

// A variant's outputs as the kernel's store leaves them, in the golden's output order (empty where
// it does not write that output, or writes the wrong number of values).
std::vector<std::vector<double>> stored_outputs(const Golden& g, const std::map<std::string, std::vector<double>>& outs) {
  std::vector<std::vector<double>> av(g.outputs.size());
  for (size_t j = 0; j < g.outputs.size(); ++j)
    if (auto it = outs.find(g.outputs[j].expected.name);
        it != outs.end() && it->second.size() == g.outputs[j].expected.data.size())
      av[j] = stored(g.outputs[j].expected.dtype, it->second);
  return av;
}

// The usual checks on one variant's stored outputs (stored_outputs; `same`: the strict emulation's,
// or null): per rule, 1 when every output it writes is accepted, 0 when one is rejected, -1 when
// the rule applies to none of them.
std::vector<int> judge_baselines(const Golden& g, const std::vector<std::vector<double>>& av,
                                 const std::vector<std::vector<double>>* same) {
  std::vector<int> v(baselines::rules().size(), -1);
  static const std::set<std::string> gates{"beta", "g", "gk", "A", "A_log", "dt", "dt_bias"};
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    const auto& o = g.outputs[j];
    if (av[j].empty()) continue;
    baselines::OutputValues ov;
    ov.name = o.expected.name, ov.dtype = o.expected.dtype, ov.got = &av[j], ov.want = &o.expected.data;
    ov.same = same && !(*same)[j].empty() ? &(*same)[j] : nullptr;
    const std::string& n = ov.name;
    ov.is_gradient = n.size() > 1 && n[0] == 'd' && g.input(n.substr(1)) != nullptr;
    ov.gate_gradient = ov.is_gradient && gates.count(n.substr(1));
    const auto r = baselines::judge(ov);
    for (size_t k = 0; k < r.size(); ++k) {
      if (r[k] == baselines::Verdict::not_applicable) continue;
      const int acc = r[k] == baselines::Verdict::accept ? 1 : 0;
      v[k] = v[k] < 0 ? acc : std::min(v[k], acc);
    }
  }
  return v;
}

void run_case(const gen::OpDef& op, const TolerancePolicy& policy, const std::vector<std::string>& profiles,
              const std::string& fixtures_dir, bool with_baselines, CaseWork& w) {
  const gen::Case& c = *w.c;
  Golden g;
  try {
    g = read_golden(w.golden_path);
  } catch (const std::exception& e) {
    w.problems.push_back(fmt::format("case {}: {}", c.name, e.what()));
    return;
  }
  for (const auto& o : g.outputs) w.outputs.emplace_back(o.expected.name, o.expected.dtype);
  for (const auto& t : g.intermediates) w.outputs.emplace_back(t.name, t.dtype);  // entries may name them
  if (const auto st = check_stale(g, fixtures_dir); st.stale) {
    w.problems.push_back(fmt::format("case {}: Stale: {} (run assay gen --op {})", c.name, st.reason, op.name));
    return;
  }
  gen::Inputs in(c);  // the golden's inputs, as check_stale just proved
  op.make_inputs(c, in);
  // Lint: a per-dtype default tolerance whose atol alone admits a 100% error on a non-zero element.
  for (const auto& o : g.outputs) {
    const auto tol = policy.lookup(op.name, o.expected.name, o.expected.dtype);
    if (!tol.is_default() || tol.exact || !(tol.atol > 0)) continue;
    int64_t n = 0;
    double smallest = INFINITY;
    for (double e : o.expected.data)
      if (std::isfinite(e) && e != 0 && std::fabs(e) <= tol.atol) ++n, smallest = std::min(smallest, std::fabs(e));
    if (n)
      w.lint.push_back(fmt::format("output '{}' ({}) of case {} falls to {} with atol {:g}: {} non-zero element(s) as small "
                                   "as {:.3g} would pass 100% wrong; give it an entry (exact, rtol-only or bound-based)",
                                   o.expected.name, name(o.expected.dtype), c.name, tol.source, tol.atol, n, smallest));
  }
  // Every variant's outputs first: the flash-attention baseline reads the strict emulation's.
  std::vector<std::optional<std::map<std::string, std::vector<double>>>> all(op.variants.size());
  const std::map<std::string, std::vector<double>>* same_precision = nullptr;
  for (size_t vi = 0; vi < op.variants.size(); ++vi) {
    const auto& v = op.variants[vi];
    try {
      all[vi] = v.run(c, in);
    } catch (const std::exception& e) {
      w.problems.push_back(fmt::format("variant {} on case {}: {}", v.name, c.name, e.what()));
      continue;
    }
    // A sampled golden (golden/SCHEMA.md "Sampled outputs"): the variant computed the whole case;
    // keep its outputs at the sampled elements, and drop its intermediates (the golden holds none).
    if (!g.sample.empty()) {
      std::map<std::string, std::vector<double>> kept;
      for (auto& [name, vals] : *all[vi]) {
        const Output* o = g.output(name);
        if (!o) continue;
        if (o->sampled && static_cast<int64_t>(vals.size()) == numel(o->full_shape)) {
          std::vector<double> pick(o->sample_offsets.size());
          for (size_t i = 0; i < pick.size(); ++i) pick[i] = vals[static_cast<size_t>(o->sample_offsets[i])];
          kept[name] = std::move(pick);
        } else {
          kept[name] = std::move(vals);
        }
      }
      all[vi] = std::move(kept);
    }
    if (!same_precision && v.kind == gen::Variant::Kind::emulation && v.profile == kStrictProfile && !all[vi]->empty())
      same_precision = &*all[vi];
  }
  std::vector<std::vector<double>> same_av;  // the same-precision reference, stored (--baselines)
  if (with_baselines && same_precision) same_av = stored_outputs(g, *same_precision);
  for (size_t vi = 0; vi < op.variants.size(); ++vi) {
    const auto& v = op.variants[vi];
    if (!all[vi]) continue;
    const auto& outs = *all[vi];
    std::vector<std::string> judged;
    if (v.kind == gen::Variant::Kind::mutant) judged = profiles;
    else if (v.profile == kStrictProfile) {
      judged = profiles;  // strict first: a correct strict kernel must pass under every profile too
    } else {
      judged.push_back(v.profile);
      judged.push_back(kStrictProfile);
    }
    // The variant's stored outputs in the golden's order (a code's verdict may depend on its scale).
    const std::vector<std::vector<double>> av = stored_outputs(g, outs);
    for (const auto& prof : judged) {
      CalibrationCell cell;
      cell.variant = v.name, cell.case_name = c.name, cell.profile = prof;
      cell.applies = !outs.empty();
      for (const auto& [name, vals] : outs) {
        // An output, or an intermediate (chunk states, trajectories: judged by the entry naming it).
        const Output* o = g.output(name);
        std::optional<Output> io;
        std::optional<Tolerance> itol;
        if (!o) {
          io = g.intermediate_output(name);
          if (!io) {
            w.problems.push_back(fmt::format("variant {} on case {}: '{}' is neither an output nor an intermediate of the golden",
                                             v.name, c.name, name));
            continue;
          }
          itol = policy.lookup_named(op.name, name, io->expected.dtype, prof);
          if (!itol) {
            w.problems.push_back(fmt::format("variant {} on case {}: intermediate '{}' ({}) has no [[tolerance]] entry of its own",
                                             v.name, c.name, name, assay::name(io->expected.dtype)));
            continue;
          }
          o = &*io;
        }
        if (vals.size() != o->expected.data.size()) {
          w.problems.push_back(fmt::format("variant {} on case {}: output '{}' has {} values, the golden {}", v.name, c.name,
                                           name, vals.size(), o->expected.data.size()));
          continue;
        }
        const auto r = itol ? compare_tensor(*o, stored(o->expected.dtype, vals), *itol)
                            : compare_output(policy, op.name, g.outputs, static_cast<size_t>(o - g.outputs.data()), av, prof);
        if (r.verdict != Verdict::Passed) cell.passed = false;
        if (r.max_ratio > cell.ratio || cell.worst_output.empty()) {
          cell.ratio = std::max(cell.ratio, r.max_ratio);
          cell.worst_output = name;
        }
        if (!r.hint.empty() && cell.hint.empty()) cell.hint = fmt::format("'{}': {}", name, r.hint);
      }
      const std::string& home = v.kind == gen::Variant::Kind::mutant ? std::string(kStrictProfile) : v.profile;
      if (with_baselines && cell.applies && prof == home)
        cell.baselines = judge_baselines(g, av, &outs == same_precision || same_av.empty() ? nullptr : &same_av);
      w.cells.push_back(std::move(cell));
    }
  }
}

void summarize(const gen::OpDef& op, OpCalibration& oc) {
  for (const auto& v : op.variants) {
    VariantSummary s;
    s.name = v.name, s.what = v.what, s.profile = v.profile;
    const bool mutant = v.kind == gen::Variant::Kind::mutant;
    s.kind = mutant ? "mutant" : "emulation";
    if (mutant) s.profile = kStrictProfile;
    std::map<std::string, double> best;  // profile -> best kill
    s.baseline_rejected.assign(baselines::rules().size(), 0);
    s.baseline_judged.assign(baselines::rules().size(), 0);
    for (const auto& cell : oc.cells) {
      if (cell.variant != v.name || !cell.applies) continue;
      for (size_t k = 0; k < cell.baselines.size(); ++k)
        if (cell.baselines[k] >= 0) ++s.baseline_judged[k], s.baseline_rejected[k] += cell.baselines[k] == 0;
      if (mutant) {
        double& b = best[cell.profile];
        if (!cell.passed) b = std::max(b, cell.ratio);
        if (cell.profile == kStrictProfile) {
          ++s.cases_applied;
          if (!cell.passed) ++s.cases_failed;
          if (!cell.passed && (cell.ratio > s.margin || s.margin_case.empty()))
            s.margin = cell.ratio, s.margin_case = cell.case_name, s.margin_output = cell.worst_output;
        }
      } else if (cell.profile == v.profile) {
        ++s.cases_applied;
        if (!cell.passed) ++s.cases_failed;
        if (cell.ratio > s.margin || s.margin_case.empty())
          s.margin = cell.ratio, s.margin_case = cell.case_name, s.margin_output = cell.worst_output;
      } else if (v.profile == kStrictProfile) {  // a strict emulation judged under another profile
        if (!cell.passed) {
          ++s.profile_failures;
          if (s.profile_hint.empty())
            s.profile_hint = fmt::format("{} under profile {} ({}x allowed on '{}')", cell.case_name, cell.profile,
                                         ratio_str(cell.ratio), cell.worst_output);
        }
      } else {  // the emulation judged under strict
        if (!cell.passed) {
          ++s.strict_failures;
          if (s.strict_hint.empty()) s.strict_hint = fmt::format("{}: {}", cell.case_name, cell.hint.empty() ? "no other profile passes it" : cell.hint);
        }
      }
    }
    if (s.cases_applied == 0) s.problems.push_back("applies to no L0 case");
    if (mutant) {
      for (const auto& p : oc.profiles) s.kill_by_profile.emplace_back(p, best.count(p) ? best[p] : 0.0);
      if (s.cases_applied > 0 && s.cases_failed == 0)
        s.problems.push_back("SURVIVES: accepted on every case it applies to (the policy cannot tell it from a correct kernel)");
      for (const auto& [p, b] : s.kill_by_profile)
        if (s.cases_applied > 0 && b < oc.kill_min)
          s.problems.push_back(fmt::format("best kill under profile {} is {}x allowed, below the floor {}x", p, ratio_str(b),
                                           ratio_str(oc.kill_min)));
    } else {
      if (s.cases_failed > 0)
        s.problems.push_back(fmt::format("REJECTED on {} of {} cases under its own profile {} (worst {}x allowed on {})",
                                         s.cases_failed, s.cases_applied, s.profile, ratio_str(s.margin), s.margin_case));
      else if (s.margin > oc.emulation_max)
        s.problems.push_back(fmt::format("worst margin {} of allowed on {} ('{}'), above the floor {}", ratio_str(s.margin),
                                         s.margin_case, s.margin_output, ratio_str(oc.emulation_max)));
      if (s.profile_failures > 0)
        s.problems.push_back(fmt::format("passes strict but is REJECTED under another profile on {} case(s), e.g. {}: a "
                                         "profile must allow every element at least what strict allows",
                                         s.profile_failures, s.profile_hint));
      if (s.profile != kStrictProfile && s.cases_applied > 0 && s.strict_failures == 0)
        s.problems.push_back(fmt::format("passes strict on every case: profile {} is not needed to describe it", s.profile));
    }
    oc.variants.push_back(std::move(s));
  }
}

}  // namespace

CalibrationReport calibrate(const CalibrateOptions& o) {
  CalibrationReport rep;
  std::vector<std::string> ops = o.ops;
  if (ops.empty()) {
    for (const auto& n : gen::op_names())
      if (fs::exists(fs::path(o.fixtures_dir) / (n + ".toml"))) ops.push_back(n);
  }
  for (const auto& opname : ops) {
    const gen::OpDef* op = gen::find_op(opname);
    if (!op) throw InputError(fmt::format("--op {}: unknown op (known: {})", opname, fmt::join(gen::op_names(), ", ")));
    const std::string fpath = (fs::path(o.fixtures_dir) / (opname + ".toml")).string();
    const gen::Fixture fx = gen::load_fixture(fpath);
    const TolerancePolicy policy = TolerancePolicy::for_fixture(fx);
    OpCalibration oc;
    oc.op = opname;
    oc.baselines = o.baselines;
    oc.profiles = policy.profiles(opname);
    if (const auto* cn = fx.doc.get("calibrate")) {
      const auto* ct = cn->as_table();
      if (!ct) throw InputError(fmt::format("{}: [calibrate]: expected a table", fpath));
      for (const auto& [k, v] : *ct) {
        const auto d = v.value<double>();
        if (!d || !(*d > 0)) throw InputError(fmt::format("{}: [calibrate] field '{}': must be a positive number", fpath, k.str()));
        if (k.str() == "emulation_max") oc.emulation_max = *d;
        else if (k.str() == "kill_min") oc.kill_min = *d;
        else throw InputError(fmt::format("{}: [calibrate] field '{}': unknown (emulation_max, kill_min)", fpath, k.str()));
      }
    }
    std::vector<CaseWork> work;
    for (const auto& c : fx.cases) {
      if (c.level != "L0" || fnmatch(o.case_glob.c_str(), c.name.c_str(), 0) != 0) continue;
      CaseWork w;
      w.c = &c;
      w.golden_path = (fs::path(o.golden_dir) / golden_rel_path(opname, c.name)).string();
      work.push_back(std::move(w));
      oc.cases.push_back(c.name);
    }
    if (work.empty()) throw InputError(fmt::format("{}: no L0 case matches --case {}", fpath, o.case_glob));
    const int jobs = std::max(1, std::min<int>(o.jobs > 0 ? o.jobs : static_cast<int>(std::thread::hardware_concurrency()),
                                               static_cast<int>(work.size())));
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < jobs; ++t)
      pool.emplace_back([&] {
        for (size_t i; (i = next++) < work.size();) {
          try {
            run_case(*op, policy, oc.profiles, o.fixtures_dir, o.baselines, work[i]);
          } catch (const std::exception& e) {  // work[i] is this thread's alone
            work[i].problems.push_back(fmt::format("case {}: {}", work[i].c->name, e.what()));
          }
        }
      });
    for (auto& t : pool) t.join();
    std::set<std::pair<std::string, DType>> seen;
    for (auto& w : work) {
      for (auto& c : w.cells) oc.cells.push_back(std::move(c));
      for (auto& p : w.problems) oc.problems.push_back(std::move(p));
      for (const auto& od : w.outputs) seen.insert(od);
      for (auto& l : w.lint) oc.problems.push_back(std::move(l));
    }
    // Policy-level checks: every entry selectable, every non-strict profile proven by an emulation.
    for (const auto& e : policy.entries()) {
      const bool hit = std::any_of(seen.begin(), seen.end(), [&](const auto& od) {
        return od.second == e.dtype && (e.output == "*" || e.output == od.first);
      });
      if (!hit)
        oc.problems.push_back(fmt::format("{}: entry (output '{}', dtype {}, profile {}) can never be selected: no L0 golden "
                                          "of {} has that output or intermediate in that dtype",
                                          e.tol.source, e.output, name(e.dtype), e.profile, opname));
    }
    // Monotone profiles: a profile entry written tighter than strict's tolerance for the same
    // (output, dtype) in any term is an error (the lookup widens it, so the entry would say less
    // than what is applied). Strict's tolerance is its named entry, its "*" entry or the default.
    for (const auto& e : policy.entries()) {
      if (e.profile == kStrictProfile || e.output == "*") continue;
      const Tolerance st = policy.lookup(opname, e.output, e.dtype, kStrictProfile);
      std::vector<std::string> lower;
      if (e.tol.atol < st.atol) lower.push_back(fmt::format("atol {:g} < {:g}", e.tol.atol, st.atol));
      if (e.tol.rtol < st.rtol) lower.push_back(fmt::format("rtol {:g} < {:g}", e.tol.rtol, st.rtol));
      if (e.tol.bound_k < st.bound_k) lower.push_back(fmt::format("bound_k {:g} < {:g}", e.tol.bound_k, st.bound_k));
      if (e.tol.bound2_k < st.bound2_k) lower.push_back(fmt::format("bound2_k {:g} < {:g}", e.tol.bound2_k, st.bound2_k));
      if (e.tol.max_mismatch < st.max_mismatch)
        lower.push_back(fmt::format("max_mismatch {} < {}", e.tol.max_mismatch, st.max_mismatch));
      if (e.tol.exact != st.exact || e.tol.period != st.period) lower.push_back("compares differently (exact / period)");
      if (!lower.empty())
        oc.problems.push_back(fmt::format("{}: entry (output '{}', dtype {}, profile {}) is tighter than strict's {} ({}): a "
                                          "profile adds roundings to strict's error model and can never allow less; drop "
                                          "the entry or add its terms to strict's",
                                          e.tol.source, e.output, name(e.dtype), e.profile, st.source, fmt::join(lower, ", ")));
    }
    for (const auto& p : oc.profiles) {
      const bool proven = std::any_of(op->variants.begin(), op->variants.end(), [&](const gen::Variant& v) {
        return v.kind == gen::Variant::Kind::emulation && v.profile == p;
      });
      if (!proven)
        oc.problems.push_back(fmt::format("profile {} has no emulation of a correct kernel that proves its entries", p));
    }
    const bool any_mutant = std::any_of(op->variants.begin(), op->variants.end(),
                                        [](const gen::Variant& v) { return v.kind == gen::Variant::Kind::mutant; });
    if (!any_mutant) oc.problems.push_back("the op has no mutant: nothing shows its tolerances reject anything");
    summarize(*op, oc);
    rep.ops.push_back(std::move(oc));
  }
  return rep;
}

void print_calibration(const CalibrationReport& r, bool verbose) {
  for (const auto& oc : r.ops) {
    int nm = 0, ne = 0;
    for (const auto& v : oc.variants) (v.kind == "mutant" ? nm : ne)++;
    fmt::print("calibrate {}: {} L0 cases, {} mutants, {} emulations, profiles {}; floors: emulations <= {} of allowed, "
               "kills >= {}x\n",
               oc.op, oc.cases.size(), nm, ne, fmt::join(oc.profiles, ", "), ratio_str(oc.emulation_max), ratio_str(oc.kill_min));
    for (const auto& v : oc.variants) {
      if (v.kind == "mutant") {
        std::string byp;
        for (const auto& [p, b] : v.kill_by_profile)
          if (p != kStrictProfile) byp += fmt::format(", {} {}x", p, ratio_str(b));
        fmt::print("  {} mutant    {:<28} killed on {:>2}/{:<2} cases, best {}x ({}: {}){}\n", v.problems.empty() ? "ok  " : "FAIL",
                   v.name, v.cases_failed, v.cases_applied, ratio_str(v.margin), v.margin_case, v.margin_output, byp);
      } else {
        fmt::print("  {} emulation {:<28} [{}] passes {:>2}/{:<2} cases, worst {} of allowed ({}: {}){}\n",
                   v.problems.empty() ? "ok  " : "FAIL", v.name, v.profile, v.cases_applied - v.cases_failed, v.cases_applied,
                   ratio_str(v.margin), v.margin_case, v.margin_output,
                   v.profile == kStrictProfile ? ""
                                               : fmt::format("; under strict rejected on {}/{} (e.g. {})", v.strict_failures,
                                                             v.cases_applied, v.strict_hint));
      }
      for (const auto& p : v.problems) fmt::print("       PROBLEM: {}: {}\n", v.name, p);
    }
    for (const auto& p : oc.problems) fmt::print("  PROBLEM: {}\n", p);
    if (verbose) {
      fmt::print("  kill matrix (error / allowed under strict; '.' = does not apply, '(r)' = accepted):\n");
      for (const auto& v : oc.variants) {
        std::string row;
        for (const auto& c : oc.cells)
          if (c.variant == v.name && c.profile == (v.kind == "mutant" ? std::string(kStrictProfile) : v.profile))
            row += fmt::format(" {}={}", c.case_name, !c.applies ? "." : (c.passed ? "(" + ratio_str(c.ratio) + ")" : ratio_str(c.ratio)));
        fmt::print("    {:<28}{}\n", v.name, row);
      }
    }
  }
  for (const auto& oc : r.ops) {
    int nm = 0, killed = 0;
    double min_kill = INFINITY, max_emu = 0;
    std::string kw, ew;
    for (const auto& v : oc.variants) {
      if (v.kind == "mutant") {
        ++nm;
        if (v.cases_failed > 0) ++killed;
        if (v.margin < min_kill || kw.empty()) min_kill = v.margin, kw = v.name;
      } else if (v.margin >= max_emu) {
        max_emu = v.margin, ew = v.name;
      }
    }
    fmt::print("summary {:<12} {}: mutants {}/{} killed, smallest best-kill {}x ({}), largest emulation margin {} ({})\n", oc.op,
               oc.ok() ? "PASS" : "FAIL", killed, nm, nm ? ratio_str(min_kill) : "-", kw, ratio_str(max_emu), ew.empty() ? "-" : ew);
  }
  if (!r.ops.empty() && r.ops.front().baselines) {
    fmt::print("\nbaselines: the usual checks on the same variants and cases (verify/calibrate/baselines.h), beside assay's rule\n");
    for (const auto& ru : baselines::rules()) fmt::print("  {:<13} {}\n", ru.name, ru.what);
    fmt::print("\n{}", baselines_table(r));
  }
}

std::string baselines_table(const CalibrationReport& r) {
  const auto& rules = baselines::rules();
  std::string t = "| op | check | mutants missed | correct emulations rejected |\n|---|---|---|---|\n";
  std::string names;
  for (const auto& oc : r.ops) {
    int nm = 0, ne = 0, missed = 0, rejected = 0;
    for (const auto& v : oc.variants) {
      if (v.kind == "mutant") ++nm, missed += v.cases_applied > 0 && v.cases_failed == 0;
      else ++ne, rejected += v.cases_failed > 0;
    }
    t += fmt::format("| {} | **assay** | {} of {} | {} of {} |\n", oc.op, missed, nm, rejected, ne);
    for (size_t k = 0; k < rules.size(); ++k) {
      int jm = 0, je = 0;
      std::vector<std::string> miss, rej;
      for (const auto& v : oc.variants) {
        if (k >= v.baseline_judged.size() || v.baseline_judged[k] == 0) continue;
        if (v.kind == "mutant") {
          ++jm;
          if (v.baseline_rejected[k] == 0) miss.push_back(v.name);
        } else {
          ++je;
          if (v.baseline_rejected[k] > 0) rej.push_back(v.name);
        }
      }
      auto cell = [](size_t n, int of) { return of ? fmt::format("{} of {}", n, of) : std::string("n/a"); };
      t += fmt::format("| {} | {} | {} | {} |\n", oc.op, rules[k].name, cell(miss.size(), jm), cell(rej.size(), je));
      if (!miss.empty() || !rej.empty())
        names += fmt::format("  {} {}: {}{}{}\n", oc.op, rules[k].name, miss.empty() ? "" : "misses " + fmt::format("{}", fmt::join(miss, ", ")),
                             !miss.empty() && !rej.empty() ? "; " : "",
                             rej.empty() ? "" : "rejects correct " + fmt::format("{}", fmt::join(rej, ", ")));
    }
  }
  return t + (names.empty() ? "" : "\n" + names);
}

nlohmann::json calibration_json(const CalibrationReport& r) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json("inf"); };
  nlohmann::json j{{"ok", r.ok()}, {"ops", nlohmann::json::array()}};
  for (const auto& oc : r.ops) {
    nlohmann::json o{{"op", oc.op},           {"ok", oc.ok()},           {"cases", oc.cases},
                     {"profiles", oc.profiles}, {"emulation_max", oc.emulation_max}, {"kill_min", oc.kill_min},
                     {"problems", oc.problems}, {"variants", nlohmann::json::array()}, {"matrix", nlohmann::json::array()}};
    for (const auto& v : oc.variants) {
      nlohmann::json vj{{"name", v.name},       {"kind", v.kind},           {"profile", v.profile},
                        {"what", v.what},       {"cases_applied", v.cases_applied}, {"cases_rejected", v.cases_failed},
                        {"margin", num(v.margin)}, {"margin_case", v.margin_case}, {"margin_output", v.margin_output},
                        {"problems", v.problems}};
      if (v.kind == "mutant") {
        for (const auto& [p, b] : v.kill_by_profile) vj["best_kill_by_profile"][p] = num(b);
      } else if (v.profile != kStrictProfile) {
        vj["strict_rejections"] = v.strict_failures;
        vj["strict_hint"] = v.strict_hint;
      } else {
        vj["profile_rejections"] = v.profile_failures;
        vj["profile_hint"] = v.profile_hint;
      }
      if (oc.baselines)
        for (size_t k = 0; k < baselines::rules().size() && k < v.baseline_judged.size(); ++k)
          vj["baselines"][baselines::rules()[k].name] = {{"cases_judged", v.baseline_judged[k]},
                                                         {"cases_rejected", v.baseline_rejected[k]}};
      o["variants"].push_back(vj);
    }
    for (const auto& c : oc.cells) {
      nlohmann::json cj{{"variant", c.variant}, {"case", c.case_name}, {"profile", c.profile}, {"applies", c.applies},
                        {"accepted", c.passed}, {"ratio", num(c.ratio)}, {"output", c.worst_output}, {"hint", c.hint}};
      for (size_t k = 0; k < c.baselines.size(); ++k)
        cj["baselines"][baselines::rules()[k].name] = c.baselines[k] < 0 ? "n/a" : c.baselines[k] ? "accepted" : "rejected";
      o["matrix"].push_back(std::move(cj));
    }
    j["ops"].push_back(o);
  }
  return j;
}

}  // namespace assay
