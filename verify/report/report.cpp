#include "verify/report/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "verify/judge/error_profile.h"
#include "verify/io/safe_files.h"

namespace assay {

int RunReport::count(Verdict v) const {
  int n = 0;
  for (const auto& c : cases) n += c.verdict == v;
  return n;
}

int RunReport::exit_code() const {
  if (count(Verdict::Incorrect) || count(Verdict::Failed) || count(Verdict::Hung)) return kExitFail;
  if (count(Verdict::Stale)) return kExitInput;
  if (!count(Verdict::Passed)) return kExitCouldNotRun;
  return kExitPass;
}

static nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

nlohmann::json tensor_json(const TensorReport& r) {
  nlohmann::json j{{"name", r.name}, {"kind", r.intermediate ? "intermediate" : "output"}, {"dtype", name(r.dtype)}, {"shape", r.shape}, {"verdict", verdict_name(r.verdict)},
          {"max_abs", finite_or_null(r.max_abs)}, {"max_rel", finite_or_null(r.max_rel)},
          {"rms_rel", finite_or_null(r.rms_rel)}, {"cosine", finite_or_null(r.cosine)},
          {"ulp_max", finite_or_null(r.ulp_max)}, {"ulp_p99", finite_or_null(r.ulp_p99)}, {"mismatches", r.mismatches},
          {"nonfinite_mismatches", r.nonfinite_mismatches}, {"first_mismatch", r.first_bad_index},
          {"worst_mismatch", r.worst_index}, {"never_pass", r.never_pass}, {"max_ratio", finite_or_null(r.max_ratio)},
          {"hint", r.hint},
          {"tolerance", {{"atol", r.tol.atol}, {"rtol", r.tol.rtol}, {"bound_k", r.tol.bound_k}, {"exact", r.tol.exact},
                         {"period", r.tol.period}, {"max_mismatch", r.tol.max_mismatch}, {"profile", r.tol.profile},
                         {"why", r.tol.why}, {"source", r.tol.source}}}};
  if (r.error_profile) j["error_profile"] = to_json(*r.error_profile);
  return j;
}

double worst_ratio(const CaseResult& c) {
  double w = -1;
  for (const auto& t : c.tensors) w = std::max(w, t.max_ratio);
  return w;
}

std::vector<KernelSummary> kernel_summaries(const RunReport& r) {
  std::vector<KernelSummary> ks;
  for (const auto& c : r.cases) {
    auto it = std::find_if(ks.begin(), ks.end(), [&](const KernelSummary& k) { return k.kernel == c.kernel; });
    if (it == ks.end()) {
      KernelSummary k;
      k.kernel = c.kernel;
      it = ks.insert(ks.end(), std::move(k));
    }
    switch (c.verdict) {
      case Verdict::Passed: {
        ++it->passed;
        const double w = worst_ratio(c);
        if (w > it->closest_pass) it->closest_pass = w, it->closest_case = c.op + "/" + c.case_name;
        break;
      }
      case Verdict::Incorrect: ++it->incorrect; break;
      case Verdict::Failed: ++it->failed; break;
      case Verdict::Hung: ++it->hung; break;
      case Verdict::Stale: ++it->stale; break;
      case Verdict::NotSupported: ++it->not_supported; break;
      case Verdict::NotRun: ++it->not_run; break;
    }
  }
  std::stable_sort(ks.begin(), ks.end(), [](const KernelSummary& a, const KernelSummary& b) {
    return a.bad() != b.bad() ? a.bad() : a.kernel < b.kernel;
  });
  return ks;
}

std::vector<std::pair<std::string, int>> not_supported_by_reason(const RunReport& r) {
  std::vector<std::pair<std::string, int>> v;
  for (const auto& c : r.cases) {
    if (c.verdict != Verdict::NotSupported) continue;
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& p) { return p.first == c.reason; });
    if (it == v.end()) v.emplace_back(c.reason, 1);
    else ++it->second;
  }
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return v;
}

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json j{{"tool", r.tool},          {"assay_version", r.assay_version}, {"git_rev", r.git_rev},
                   {"device", r.device},      {"device_error", r.device_error},   {"shard", r.shard},
                   {"golden_dir", r.golden_dir}, {"fixtures_dir", r.fixtures_dir}, {"fixture_checked", r.fixture_checked},
                   {"plugins", r.plugins},    {"wall_s", r.wall_s},               {"exit_code", r.exit_code()}};
  if (!r.sanitizer_version.empty()) j["sanitizer_version"] = r.sanitizer_version;
  nlohmann::json counts = nlohmann::json::object();
  for (auto v : {Verdict::Passed, Verdict::Incorrect, Verdict::Failed, Verdict::Hung, Verdict::NotSupported, Verdict::Stale,
                 Verdict::NotRun})
    counts[std::string(verdict_name(v))] = r.count(v);
  j["counts"] = counts;
  // The run at a glance: per kernel (failures first) and the NotSupported pairs by reason.
  nlohmann::json kj = nlohmann::json::array();
  for (const auto& k : kernel_summaries(r))
    kj.push_back({{"kernel", k.kernel}, {"Passed", k.passed}, {"Incorrect", k.incorrect}, {"Failed", k.failed},
                  {"Hung", k.hung}, {"Stale", k.stale}, {"NotSupported", k.not_supported}, {"NotRun", k.not_run},
                  {"closest_pass", finite_or_null(k.closest_pass < 0 ? NAN : k.closest_pass)},
                  {"closest_pass_case", k.closest_case}});
  nlohmann::json nj = nlohmann::json::array();
  for (const auto& [reason, n] : not_supported_by_reason(r)) nj.push_back({{"reason", reason}, {"pairs", n}});
  j["summary"] = {{"kernels", kj}, {"not_supported_by_reason", nj}};
  j["notes"] = r.notes;
  j["cases"] = nlohmann::json::array();
  for (const auto& c : r.cases) {
    nlohmann::json cj{{"kernel", c.kernel}, {"kernel_source", c.kernel_source}, {"op", c.op}, {"case", c.case_name},
                      {"golden", c.golden}, {"deterministic", c.deterministic}, {"profile", c.profile},
                      {"verdict", verdict_name(c.verdict)},
                      {"reason", c.reason}, {"findings", c.findings}, {"kernel_ms", c.kernel_ms}, {"wall_s", c.wall_s}};
    if (!c.relation.empty()) cj["relation"] = c.relation;
    if (!c.log_tail.empty()) cj["log_tail"] = c.log_tail;
    if (!c.repro.empty()) cj["repro"] = c.repro;
    if (!c.sanitizer_summary.empty()) cj["sanitizer"] = c.sanitizer_summary;
    cj["tensors"] = nlohmann::json::array();
    for (const auto& t : c.tensors) cj["tensors"].push_back(tensor_json(t));
    j["cases"].push_back(cj);
  }
  return j;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (unsigned char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (ch < 0x20 && ch != '\n' && ch != '\t' && ch != '\r') o += '?';  // XML 1.0 forbids the other C0 controls
        else o += static_cast<char>(ch);
    }
  }
  return o;
}

std::string to_junit(const RunReport& r) {
  const int failures = r.count(Verdict::Incorrect);
  const int errors = r.count(Verdict::Failed) + r.count(Verdict::Hung) + r.count(Verdict::Stale);
  const int skipped = r.count(Verdict::NotSupported) + r.count(Verdict::NotRun);
  std::string dev = r.device.is_object() ? r.device.value("name", std::string()) : std::string("no device");
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += fmt::format("<testsuites name=\"assay {}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3f}\">\n",
                   xml_escape(r.tool), r.cases.size(), failures, errors, skipped, r.wall_s);
  s += fmt::format("  <testsuite name=\"assay.{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3f}\">\n",
                   xml_escape(r.tool), r.cases.size(), failures, errors, skipped, r.wall_s);
  s += "    <properties>\n";
  s += fmt::format("      <property name=\"device\" value=\"{}\"/>\n", xml_escape(dev));
  if (r.device.is_object())
    for (const char* k : {"driver", "cuda_runtime", "compute_capability", "uuid"})
      s += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", k, xml_escape(r.device.value(k, std::string())));
  s += fmt::format("      <property name=\"assay_version\" value=\"{}\"/>\n", xml_escape(r.assay_version));
  s += fmt::format("      <property name=\"git_rev\" value=\"{}\"/>\n", xml_escape(r.git_rev));
  if (!r.shard.empty()) s += fmt::format("      <property name=\"shard\" value=\"{}\"/>\n", xml_escape(r.shard));
  if (!r.sanitizer_version.empty())
    s += fmt::format("      <property name=\"sanitizer_version\" value=\"{}\"/>\n", xml_escape(r.sanitizer_version));
  s += "    </properties>\n";
  for (const auto& c : r.cases) {
    s += fmt::format("    <testcase classname=\"{}.{}\" name=\"{}\" time=\"{:.3f}\"", xml_escape(c.op), xml_escape(c.kernel),
                     xml_escape(c.case_name), c.wall_s);
    std::string body;
    for (const auto& t : c.tensors) body += t.summary() + "\n";
    for (const auto& f : c.findings) body += f + "\n";
    if (!c.log_tail.empty()) body += "--- worker output (tail) ---\n" + c.log_tail + "\n";
    const std::string msg = fmt::format("{}: {}", verdict_name(c.verdict), c.reason);
    switch (c.verdict) {
      case Verdict::Passed: s += "/>\n"; continue;
      case Verdict::Incorrect:
        s += fmt::format(">\n      <failure type=\"Incorrect\" message=\"{}\">{}</failure>\n", xml_escape(msg), xml_escape(body));
        break;
      case Verdict::Failed: case Verdict::Hung: case Verdict::Stale:
        s += fmt::format(">\n      <error type=\"{}\" message=\"{}\">{}</error>\n", verdict_name(c.verdict), xml_escape(msg),
                         xml_escape(body));
        break;
      case Verdict::NotSupported: case Verdict::NotRun:
        s += fmt::format(">\n      <skipped message=\"{}\"/>\n", xml_escape(msg));
        break;
    }
    s += "    </testcase>\n";
  }
  s += "  </testsuite>\n</testsuites>\n";
  return s;
}

// Every string here may come from an input (a candidate's attributes, an .error file, a golden's
// provenance): printed through printable(), so control characters reach the terminal escaped and
// each row stays one line.
void print_console(const RunReport& r, bool verbose) {
  if (r.device.is_object())
    fmt::print("assay {}: {} | driver {} | CUDA runtime {} | cc {}{}\n", r.tool, printable(r.device.value("name", std::string("?"))),
               printable(r.device.value("driver", std::string("?"))), printable(r.device.value("cuda_runtime", std::string("?"))),
               printable(r.device.value("compute_capability", std::string("?"))),
               r.sanitizer_version.empty() ? "" : " | " + printable(r.sanitizer_version));
  else if (r.tool == "compare")
    fmt::print("assay compare: goldens {} (candidates computed elsewhere; no device needed)\n", printable(r.golden_dir));
  else
    fmt::print("assay {}: NOT RUN: {}\n", r.tool, printable(r.device_error));
  if (!r.shard.empty()) fmt::print("shard {}\n", printable(r.shard));
  auto kernel_col = [](const CaseResult& c) {
    return printable(c.profile == kStrictProfile ? c.kernel : c.kernel + " [" + c.profile + "]", 200);
  };
  auto case_col = [](const CaseResult& c) { return printable(c.op + "/" + c.case_name, 200); };
  size_t kw = 6, cw = 4;
  for (const auto& c : r.cases) kw = std::max(kw, kernel_col(c).size()), cw = std::max(cw, case_col(c).size());
  fmt::print("{:<12} {:<{}} {:<{}} {:>9} {:>10}  {}\n", "verdict", "kernel", kw, "case", cw, "max_abs", "kernel_ms", "detail");
  for (const auto& c : r.cases) {
    double ma = 0;
    for (const auto& t : c.tensors) ma = std::max(ma, t.max_abs);
    std::string ms = c.kernel_ms.empty() ? "-" : fmt::format("{:.3f}", c.kernel_ms.front());
    fmt::print("{:<12} {:<{}} {:<{}} {:>9} {:>10}  {}\n", verdict_name(c.verdict), kernel_col(c), kw, case_col(c), cw,
               c.tensors.empty() ? std::string("-") : fmt::format("{:.2e}", ma), ms, printable(c.reason));
    const bool bad = c.verdict != Verdict::Passed && c.verdict != Verdict::NotSupported;
    if (verbose || bad) {
      for (const auto& t : c.tensors)
        if (verbose || t.verdict != Verdict::Passed) fmt::print("    {}\n", printable(t.summary()));
      for (const auto& f : c.findings) fmt::print("    {}\n", printable(f));
      if (!c.repro.empty()) fmt::print("    repro bundle: {}\n", printable(c.repro));
      if (!c.log_tail.empty() && (c.verdict == Verdict::Failed || c.verdict == Verdict::Hung)) {
        const std::string t = printable_lines(c.log_tail);
        size_t p = 0;
        while (p < t.size()) {
          size_t q = t.find('\n', p);
          fmt::print("    | {}\n", t.substr(p, q == std::string::npos ? std::string::npos : q - p));
          if (q == std::string::npos) break;
          p = q + 1;
        }
      }
    }
  }
  for (const auto& n : r.notes) fmt::print("note: {}\n", printable(n));
  // The run at a glance, last: one line per kernel, failures first.
  for (const auto& k : kernel_summaries(r)) {
    std::string counts;
    const std::pair<int, const char*> parts[] = {{k.passed, "Passed"}, {k.incorrect, "Incorrect"}, {k.failed, "Failed"},
                                                 {k.hung, "Hung"},     {k.stale, "Stale"},         {k.not_supported, "NotSupported"},
                                                 {k.not_run, "NotRun"}};
    for (const auto& [n, what] : parts)
      if (n) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, what);
    fmt::print("{} {}: {}{}\n", k.bad() ? "FAIL" : "ok  ", printable(k.kernel, 200), counts,
               k.closest_pass >= 0 ? fmt::format("; closest pass {:.3g} of allowed ({})", k.closest_pass, printable(k.closest_case, 200))
                                   : std::string());
  }
  fmt::print("{} cases: {} Passed, {} Incorrect, {} Failed, {} Hung, {} NotSupported, {} Stale, {} NotRun ({:.1f} s)\n",
             r.cases.size(), r.count(Verdict::Passed), r.count(Verdict::Incorrect), r.count(Verdict::Failed),
             r.count(Verdict::Hung), r.count(Verdict::NotSupported), r.count(Verdict::Stale), r.count(Verdict::NotRun), r.wall_s);
}

}  // namespace assay
