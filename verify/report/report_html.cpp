#include "verify/report/report_html.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/judge/error_profile.h"
#include "verify/io/safe_files.h"

namespace assay {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string ratio_str(double r) {
  if (std::isinf(r)) return "inf";
  if (r == 0) return "0";
  if (r >= 100) return fmt::format("{:.0f}\u00d7", r);
  return fmt::format("{:.3g}\u00d7", r);
}

const char* verdict_class(Verdict v) {
  switch (v) {
    case Verdict::Passed: return "pass";
    case Verdict::Incorrect: return "incorrect";
    case Verdict::Failed: case Verdict::Hung: return "failed";
    case Verdict::Stale: return "stale";
    case Verdict::NotSupported: case Verdict::NotRun: return "skip";
  }
  return "failed";
}

// Color of one ratio: grey for 0, blue -> amber up to 1 (within tolerance), orange -> dark red above
// 1 (mismatches), near-black for infinite (code, NaN/Inf-position or never-pass mismatches).
std::string color(double r) {
  auto mix = [](int a, int b, double t) { return static_cast<int>(std::lround(a + (b - a) * t)); };
  auto rgb = [&](uint32_t c0, uint32_t c1, double t) {
    return fmt::format("#{:02x}{:02x}{:02x}", mix(c0 >> 16, c1 >> 16, t), mix((c0 >> 8) & 255, (c1 >> 8) & 255, t),
                       mix(c0 & 255, c1 & 255, t));
  };
  if (r == 0) return "#eeeeee";
  if (std::isinf(r)) return "#2b0000";
  const double l = std::log10(r);
  if (r <= 1) return rgb(0xdbe9f6, 0xf2c14e, std::clamp((l + 4) / 4, 0.0, 1.0));
  return rgb(0xe8590c, 0x7f0000, std::clamp(l / 3, 0.0, 1.0));
}

// Max error / allowed along the sequence axis, log10 y axis, the allowed line at 1.
std::string seq_plot(const ErrorProfile& p, const std::string& id) {
  const double W = 720, H = 220, L = 58, R = 14, T = 12, B = 36;
  double lo = -4, hi = 1;
  for (double x : p.seq_max_ratio)
    if (x > 0 && std::isfinite(x)) lo = std::min(lo, std::floor(std::log10(x))), hi = std::max(hi, std::ceil(std::log10(x)));
  lo = std::max(lo, -12.0);
  hi = std::min(hi + 0.5, 12.0);
  const auto npts = static_cast<double>(p.seq_max_ratio.size());
  auto X = [&](double k) { return L + (W - L - R) * (npts <= 1 ? 0.5 : k / (npts - 1)); };
  auto Y = [&](double r) {
    const double l = r <= 0 ? lo : std::isinf(r) ? hi : std::clamp(std::log10(r), lo, hi);
    return T + (H - T - B) * (hi - l) / (hi - lo);
  };
  std::string s = fmt::format(
      "<svg class=\"seq-plot\" id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"max error / allowed per {} position\">\n",
      id, W, H, W, H, esc(p.seq_axis));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fcfcfc\" stroke=\"#bbb\"/>\n", L, T, W - L - R, H - T - B);
  for (double e = std::ceil(lo); e <= hi; e += (hi - lo > 8 ? 2 : 1)) {
    const double y = Y(std::pow(10.0, e));
    s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/>"
                     "<text x=\"{}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">1e{}</text>\n",
                     L, W - R, y, y, L - 4, y + 4, e);
  }
  const double y1 = Y(1.0);
  s += fmt::format("<line class=\"allowed\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#c0392b\" stroke-dasharray=\"6 4\"/>"
                   "<text x=\"{}\" y=\"{:.1f}\" class=\"tick\" fill=\"#c0392b\" text-anchor=\"end\">allowed</text>\n",
                   L, W - R, y1, y1, W - R - 4, y1 - 4);
  std::string pts;
  for (size_t k = 0; k < p.seq_max_ratio.size(); ++k)
    pts += fmt::format("{:.1f},{:.1f} ", X(static_cast<double>(k)), Y(p.seq_max_ratio[k]));
  s += fmt::format("<polyline fill=\"none\" stroke=\"#1f5f99\" stroke-width=\"1.5\" points=\"{}\"/>\n", pts);
  for (size_t k = 0; k < p.seq_max_ratio.size(); ++k) {
    const double r = p.seq_max_ratio[k];
    if (r <= 1) continue;
    const int64_t a = static_cast<int64_t>(k) * p.seq_bin, b = std::min(p.seq_len, a + p.seq_bin) - 1;
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"><title>{} {}{}: {} allowed</title></circle>\n",
                     X(static_cast<double>(k)), Y(r), std::isinf(r) ? "#2b0000" : "#c0392b", esc(p.seq_axis), a,
                     b > a ? fmt::format("..{}", b) : "", ratio_str(r));
  }
  for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const double k = f * (npts - 1);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>\n", X(k), H - B + 14,
                     static_cast<int64_t>(std::llround(k)) * p.seq_bin);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">{} position{}</text>\n", (L + W - R) / 2,
                   H - 4, esc(p.seq_axis), p.seq_bin > 1 ? fmt::format(" (max over groups of {})", p.seq_bin) : "");
  s += fmt::format("<text x=\"12\" y=\"{}\" class=\"label\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">error / allowed</text>\n",
                   (T + H - B) / 2, (T + H - B) / 2);
  return s + "</svg>\n";
}

// (batch·head x tile) heatmap of max error / allowed.
std::string heatmap(const ErrorProfile& p, const std::string& id) {
  const double L = 58, T = 8, cw = std::clamp(660.0 / static_cast<double>(p.cols), 3.0, 24.0),
               ch = std::clamp(260.0 / static_cast<double>(p.rows), 3.0, 18.0);
  const double W = L + cw * static_cast<double>(p.cols) + 10, H = T + ch * static_cast<double>(p.rows) + 40;
  std::string s = fmt::format(
      "<svg class=\"heatmap\" id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" role=\"img\" aria-label=\"error / allowed by ({} x {} tile)\">\n",
      id, W, H, W, H, esc(p.row_axes.empty() ? "all" : p.row_axes), esc(p.seq_axis));
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c) {
      const double v = p.heat[static_cast<size_t>(r * p.cols + c)];
      s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} {} {}, {} {}..{}: "
                       "{}</title></rect>\n",
                       L + cw * static_cast<double>(c), T + ch * static_cast<double>(r), cw, ch, color(v),
                       p.row_axes.empty() ? "row" : esc(p.row_axes), r * p.row_bin,
                       p.row_bin > 1 ? fmt::format("..{}", std::min((r + 1) * p.row_bin, p.rows * p.row_bin) - 1) : "",
                       esc(p.seq_axis), c * p.tile, std::min((c + 1) * p.tile, p.seq_len) - 1, ratio_str(v));
    }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#888\"/>\n", L, T,
                   cw * static_cast<double>(p.cols), ch * static_cast<double>(p.rows));
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"label\" text-anchor=\"middle\">{} tile ({} position{} each, {} tiles)</text>\n",
                   L + cw * static_cast<double>(p.cols) / 2, H - 8, esc(p.seq_axis), p.tile, p.tile > 1 ? "s" : "", p.cols);
  s += fmt::format("<text x=\"12\" y=\"{:.1f}\" class=\"label\" transform=\"rotate(-90 12 {:.1f})\" text-anchor=\"middle\">{}{}</text>\n",
                   T + ch * static_cast<double>(p.rows) / 2, T + ch * static_cast<double>(p.rows) / 2,
                   p.row_axes.empty() ? "(no batch/head axis)" : esc(p.row_axes),
                   p.row_bin > 1 ? fmt::format(" (groups of {})", p.row_bin) : "");
  return s + "</svg>\n";
}

// Histogram of log10(error / allowed), with the zero and infinite classes at the ends.
std::string histogram(const ErrorProfile& p, const std::string& id) {
  const double W = 720, H = 170, L = 58, T = 10, B = 34;
  std::vector<int64_t> bars;
  bars.push_back(p.zero);
  for (auto c : p.hist) bars.push_back(c);
  bars.push_back(p.infinite);
  int64_t mx = 1;
  for (auto c : bars) mx = std::max(mx, c);
  const double bw = (W - L - 10) / static_cast<double>(bars.size());
  std::string s = fmt::format(
      "<svg class=\"hist\" id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"histogram of error / allowed\">\n",
      id, W, H, W, H);
  for (size_t k = 0; k < bars.size(); ++k) {
    const double h = (H - T - B) * std::sqrt(static_cast<double>(bars[k]) / static_cast<double>(mx));  // sqrt scale: small counts stay visible
    std::string what, fill;
    if (k == 0) what = "error 0", fill = "#bbbbbb";
    else if (k + 1 == bars.size()) what = "infinite (code / NaN / never-pass)", fill = "#2b0000";
    else {
      const double a = p.hist_lo + p.hist_step * static_cast<double>(k - 1);
      what = fmt::format("1e{:.1f} .. 1e{:.1f}", a, a + p.hist_step);
      fill = a >= 0 ? "#c0392b" : "#4a7fb0";
    }
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {} elements</title></rect>\n",
                     L + bw * static_cast<double>(k) + 1, H - B - h, bw - 2, h, fill, what, bars[k]);
  }
  const double x1 = L + bw * (1 + (0 - p.hist_lo) / p.hist_step);
  s += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"#c0392b\" stroke-dasharray=\"4 3\"/>\n", x1, x1, T,
                   H - B);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">0</text>", L + bw / 2, H - B + 13);
  for (int e = static_cast<int>(p.hist_lo) + 2; e <= static_cast<int>(p.hist_lo + p.hist_step * static_cast<double>(p.hist.size())) - 2; e += 2)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">1e{}</text>",
                     L + bw * (1 + (e - p.hist_lo) / p.hist_step), H - B + 13, e);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">inf</text>\n",
                   L + bw * (static_cast<double>(bars.size()) - 0.5), H - B + 13);
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">error / allowed ({} of {} elements above 1; "
                   "bar height: sqrt of the count)</text>\n",
                   (L + W) / 2, H - 4, p.over, p.n);
  return s + "</svg>\n";
}

// The table's reason: up to the first "; " hint and at most 200 characters (the case's section
// below has all of it).
std::string short_reason(const std::string& r) {
  std::string s = r.substr(0, r.find("; would pass under"));
  if (s.size() > 200) s = s.substr(0, 197) + "...";
  return s;
}

// A Passed cell: green far inside the tolerance, amber at its limit (log scale from 1e-4 to 1).
std::string pass_color(double r) {
  const double t = r <= 0 ? 0.0 : std::clamp((std::log10(r) + 4) / 4, 0.0, 1.0);
  auto mix = [t](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * t)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(0x8f, 0xf2), mix(0xd1, 0xc1), mix(0x9e, 0x4e));
}

bool is_bad(Verdict v) { return v == Verdict::Incorrect || v == Verdict::Failed || v == Verdict::Hung || v == Verdict::Stale; }

// The kernel x case matrix: rows = kernels (failures first), columns = the cases some kernel ran
// (failures first); a cell's colour is its verdict, a Passed or Incorrect cell's shade its worst
// error / allowed (color()); NotSupported is a dot. Every cell says its numbers on hover (title),
// and a failing one links to its section. No script.
std::string matrix(const RunReport& r) {
  const auto ks = kernel_summaries(r);
  std::vector<std::string> cases;
  std::map<std::string, bool> case_bad;
  std::map<std::pair<std::string, std::string>, size_t> cell;  // (kernel, op/case) -> index in r.cases
  for (size_t k = 0; k < r.cases.size(); ++k) {
    const auto& c = r.cases[k];
    const std::string id = c.op + "/" + c.case_name;
    cell[{c.kernel, id}] = k;
    if (c.verdict == Verdict::NotSupported) continue;
    if (!case_bad.count(id)) cases.push_back(id);
    case_bad[id] = case_bad[id] || is_bad(c.verdict);
  }
  if (cases.empty()) return {};
  std::stable_sort(cases.begin(), cases.end(), [&](const std::string& a, const std::string& b) {
    return case_bad[a] != case_bad[b] ? case_bad[a] : a < b;
  });
  std::string s = "<h2>Kernels &times; cases</h2>\n<p class=\"meta\">colour: the verdict; shade: the worst error / allowed "
                  "(Passed: green far inside, amber at the limit; Incorrect: orange to dark red, black for a code or NaN/Inf "
                  "mismatch); "
                  "&middot; NotSupported (listed below by reason). Failures first; hover a cell for its numbers, click a "
                  "failing one for its section.</p>\n<div class=\"mx\"><table id=\"matrix\"><thead><tr><th></th>";
  for (const auto& c : cases) s += fmt::format("<th class=\"col\"><span>{}</span></th>", esc(c));
  s += "</tr></thead>\n<tbody>\n";
  for (const auto& k : ks) {
    s += fmt::format("<tr class=\"{}\"><th>{} <span class=\"dim\">{}/{}</span></th>", k.bad() ? "bad" : "ok", esc(k.kernel),
                     k.passed, k.passed + k.incorrect + k.failed + k.hung + k.stale + k.not_run);
    for (const auto& id : cases) {
      const auto it = cell.find({k.kernel, id});
      if (it == cell.end()) {
        s += "<td class=\"c none\" title=\"not in this run\"></td>";
        continue;
      }
      const auto& c = r.cases[it->second];
      const double w = worst_ratio(c);
      std::string bg;
      if (c.verdict == Verdict::Passed) bg = fmt::format(" style=\"background:{}\"", pass_color(w));
      if (c.verdict == Verdict::Incorrect) bg = fmt::format(" style=\"background:{}\"", color(std::max(w, 0.0)));
      const std::string title = fmt::format("{} &middot; {}: {}{}", esc(k.kernel), esc(id), verdict_name(c.verdict),
                                            w >= 0 ? ", worst " + ratio_str(w) + " allowed" : std::string());
      const char* mark = c.verdict == Verdict::NotSupported ? "&middot;" : c.verdict == Verdict::Failed ? "F"
                         : c.verdict == Verdict::Hung ? "H" : c.verdict == Verdict::Stale ? "S" : c.verdict == Verdict::NotRun ? "?" : "";
      s += is_bad(c.verdict)
               ? fmt::format("<td class=\"c {}\"{} title=\"{}\"><a href=\"#case-{}\">{}</a></td>", verdict_class(c.verdict), bg,
                             title, it->second, mark)
               : fmt::format("<td class=\"c {}\"{} title=\"{}\">{}</td>", verdict_class(c.verdict), bg, title, mark);
    }
    s += "</tr>\n";
  }
  return s + "</tbody></table></div>\n";
}

// NotSupported pairs, collapsed (<details>), grouped by reason.
std::string not_supported(const RunReport& r) {
  const auto by = not_supported_by_reason(r);
  if (by.empty()) return {};
  std::string s = fmt::format("<details id=\"not-supported\"><summary>{} NotSupported pairs, {} reason{}</summary>\n"
                              "<table id=\"ns\"><tr><th>pairs</th><th>reason</th><th>kernel &middot; case (first 8)</th></tr>\n",
                              r.count(Verdict::NotSupported), by.size(), by.size() == 1 ? "" : "s");
  for (const auto& [reason, n] : by) {
    std::string who;
    int shown = 0;
    for (const auto& c : r.cases)
      if (c.verdict == Verdict::NotSupported && c.reason == reason && shown++ < 8)
        who += fmt::format("{}{} &middot; {}", who.empty() ? "" : "; ", esc(c.kernel), esc(c.op + "/" + c.case_name));
    s += fmt::format("<tr><td>{}</td><td>{}</td><td class=\"dim\">{}{}</td></tr>\n", n, esc(reason), who, n > 8 ? "; ..." : "");
  }
  return s + "</table></details>\n";
}

// Plots are drawn for the first kMaxPlotted failing tensors of a report (each heatmap is up to 64 x 64
// cells); later failing tensors keep their text (summary, indices, policy entry).
constexpr int kMaxPlotted = 60;

std::string tensor_section(const TensorReport& t, const std::string& id, bool plots) {
  std::string s = fmt::format("<div class=\"tensor {}\" id=\"{}\">\n<h3>{} <span class=\"dim\">{} {}</span> <span class=\"v {}\">{}</span></h3>\n",
                              t.verdict == Verdict::Passed ? "passing" : "failing", id, esc(t.name), name(t.dtype),
                              shape_str(t.shape), verdict_class(t.verdict), verdict_name(t.verdict));
  s += fmt::format("<p class=\"summary\">{}</p>\n", esc(t.summary()));
  if (t.mismatches > 0 || !t.never_pass.empty()) {
    s += "<table class=\"where\">";
    if (!t.first_bad_index.empty()) s += fmt::format("<tr><th>first mismatch</th><td>{}</td></tr>", esc(t.first_bad_index));
    if (!t.worst_index.empty())
      s += fmt::format("<tr><th>worst mismatch</th><td>{}: actual {:.9g}, expected {:.9g}, allowed {:.3g} ({} allowed)</td></tr>",
                       esc(t.worst_index), t.worst_actual, t.worst_expected, t.worst_allowed, ratio_str(t.max_ratio));
    for (const auto& n : t.never_pass) s += fmt::format("<tr><th>never-pass</th><td>{}</td></tr>", esc(n));
    if (!t.hint.empty()) s += fmt::format("<tr><th>hint</th><td>{}</td></tr>", esc(t.hint));
    s += "</table>\n";
  }
  const auto& tol = t.tol;
  s += fmt::format("<table class=\"policy\"><tr><th>policy entry</th><td>{} (profile {})</td></tr>"
                   "<tr><th>rule</th><td>{}</td></tr><tr><th>why</th><td>{}</td></tr></table>\n",
                   esc(tol.source), esc(tol.profile),
                   tol.exact ? std::string("exact codes") :
                       esc(fmt::format("|a - e| <= {:g} + {:g}*|e| + {:g}*bound{}{}", tol.atol, tol.rtol, tol.bound_k,
                                       tol.period > 0 ? fmt::format(" (modulo {:g})", tol.period) : "",
                                       tol.max_mismatch ? fmt::format(", up to {} mismatches", tol.max_mismatch) : "")),
                   esc(tol.why));
  if (t.error_profile && !plots)
    s += fmt::format("<p class=\"meta\">plots left out: only the first {} failing tensors of a report are plotted</p>\n", kMaxPlotted);
  if (t.error_profile && plots) {
    const auto& p = *t.error_profile;
    s += fmt::format("<figure><figcaption>max error / allowed per {} position</figcaption>\n{}</figure>\n", esc(p.seq_axis),
                     seq_plot(p, id + "-seq"));
    s += fmt::format("<figure><figcaption>max error / allowed by ({} &times; {} tile)</figcaption>\n{}</figure>\n",
                     esc(p.row_axes.empty() ? "one row" : p.row_axes), esc(p.seq_axis), heatmap(p, id + "-heat"));
    s += fmt::format("<figure><figcaption>distribution of error / allowed</figcaption>\n{}</figure>\n", histogram(p, id + "-hist"));
  }
  return s + "</div>\n";
}

const char* kStyle = R"(body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d1d1f;max-width:1200px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 6px;border-top:1px solid #ddd;padding-top:14px}
h3{font-size:15px;margin:14px 0 4px}.dim{color:#777;font-weight:normal}.meta{color:#555;margin:2px 0}
table{border-collapse:collapse}#verdicts td,#verdicts th{border-bottom:1px solid #e3e3e3;padding:3px 8px;text-align:left;vertical-align:top}
#verdicts th{background:#f3f3f3}.policy th,.where th{text-align:left;padding:2px 10px 2px 0;color:#555;font-weight:600;vertical-align:top}
.policy td,.where td{padding:2px 0}.v{display:inline-block;padding:0 6px;border-radius:3px;font-weight:600;font-size:12px}
.v.pass{background:#d8f0dc;color:#1e6b2d}.v.incorrect{background:#f8d3cf;color:#8a1c10}.v.failed{background:#5c1010;color:#fff}
.v.stale{background:#fde9b8;color:#7a5200}.v.skip{background:#e6e6e6;color:#555}.summary{font-family:ui-monospace,monospace;font-size:12px;color:#333}
pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}figure{margin:8px 0 14px}figcaption{font-size:12px;color:#555;margin-bottom:2px}
svg text.tick{font-size:10px;fill:#555}svg text.label{font-size:11px;fill:#333}.passing-list{color:#333}
.chip{margin-right:10px}#margins td{padding:1px 12px 1px 0}
.mx{overflow:auto;max-height:640px;border:1px solid #e3e3e3;margin:6px 0 10px}#matrix{border-collapse:separate;border-spacing:1px}
#matrix th{font-weight:600;font-size:12px;text-align:left;white-space:nowrap;padding:0 6px 0 0;background:#fff;position:sticky;left:0}
#matrix thead th{position:sticky;top:0;vertical-align:bottom;height:150px}#matrix th.col{padding:0}
#matrix th.col span{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;font-size:11px;white-space:nowrap}
#matrix td.c{width:13px;height:13px;min-width:13px;padding:0;text-align:center;font-size:9px;line-height:13px;color:#fff}
#matrix td.c a{color:#fff;text-decoration:none;display:block}#matrix td.failed{background:#5c1010}#matrix td.stale{background:#e0a800}
#matrix td.skip{background:#f4f4f4;color:#999}#matrix td.none{background:#fff}#matrix tr.bad th{color:#8a1c10}
#not-supported{margin:6px 0 14px}#ns td,#ns th{padding:1px 10px 1px 0;text-align:left;vertical-align:top;font-size:13px})";

}  // namespace

std::string to_html(const RunReport& r) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  s += fmt::format("<title>assay {}: {} Passed of {}</title>\n<style>\n{}\n</style>\n</head>\n<body>\n", esc(r.tool),
                   r.count(Verdict::Passed), r.cases.size(), kStyle);
  s += fmt::format("<h1>assay {}</h1>\n", esc(r.tool));
  const std::string dev = r.device.is_object()
                              ? fmt::format("{} | driver {} | CUDA runtime {}", r.device.value("name", std::string("?")),
                                            r.device.value("driver", std::string("?")),
                                            r.device.value("cuda_runtime", std::string("?")))
                              : r.tool == "compare" ? std::string("candidates computed elsewhere (no device needed)")
                                                    : "not run on a device: " + r.device_error;
  s += fmt::format("<p class=\"meta\">{} &middot; assay {} ({}) &middot; goldens {} &middot; {:.1f} s{}</p>\n", esc(dev),
                   esc(r.assay_version), esc(r.git_rev), esc(r.golden_dir), r.wall_s,
                   r.fixture_checked ? "" : " &middot; fixtures not checked");
  s += "<p id=\"summary\">";
  for (auto v : {Verdict::Passed, Verdict::Incorrect, Verdict::Failed, Verdict::Hung, Verdict::NotSupported, Verdict::Stale,
                 Verdict::NotRun})
    if (r.count(v)) s += fmt::format("<span class=\"chip\"><span class=\"v {}\">{}</span> {}</span>", verdict_class(v), verdict_name(v), r.count(v));
  s += fmt::format("<span class=\"chip\">exit code {}</span></p>\n", r.exit_code());
  for (const auto& n : r.notes) s += fmt::format("<p class=\"meta\">note: {}</p>\n", esc(n));
  s += matrix(r);
  s += not_supported(r);
  s += "<table id=\"verdicts\">\n<thead><tr><th>verdict</th><th>kernel</th><th>case</th><th>profile</th>"
       "<th>worst error / allowed</th><th>reason</th></tr></thead>\n<tbody>\n";
  // Failures first; NotSupported pairs are in the collapsed list above.
  std::vector<size_t> order;
  for (size_t k = 0; k < r.cases.size(); ++k)
    if (r.cases[k].verdict != Verdict::NotSupported) order.push_back(k);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return r.cases[a].verdict != Verdict::Passed && r.cases[b].verdict == Verdict::Passed;
  });
  for (const size_t k : order) {
    const auto& c = r.cases[k];
    const bool detail = c.verdict != Verdict::Passed && c.verdict != Verdict::NotSupported;
    const double w = worst_ratio(c);
    s += fmt::format("<tr class=\"{}\"><td><span class=\"v {}\">{}</span></td><td>{}</td><td>{}{}{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     verdict_class(c.verdict), verdict_class(c.verdict), verdict_name(c.verdict), esc(c.kernel),
                     detail ? fmt::format("<a href=\"#case-{}\">", k) : "", esc(c.op + "/" + c.case_name), detail ? "</a>" : "",
                     esc(c.profile), w < 0 ? "-" : ratio_str(w), esc(short_reason(c.reason)));
  }
  s += "</tbody>\n</table>\n";
  int plotted = 0;
  for (size_t k = 0; k < r.cases.size(); ++k) {
    const auto& c = r.cases[k];
    if (c.verdict == Verdict::Passed || c.verdict == Verdict::NotSupported) continue;
    s += fmt::format("<section class=\"case\" id=\"case-{}\">\n<h2><span class=\"v {}\">{}</span> {} &middot; {}</h2>\n", k,
                     verdict_class(c.verdict), verdict_name(c.verdict), esc(c.kernel), esc(c.op + "/" + c.case_name));
    s += fmt::format("<p>{}</p>\n", esc(c.reason));
    s += fmt::format("<p class=\"meta\">golden {} &middot; profile {}</p>\n", esc(c.golden), esc(c.profile));
    if (!c.findings.empty()) {
      s += "<ul class=\"findings\">";
      for (const auto& f : c.findings) s += "<li>" + esc(f) + "</li>";
      s += "</ul>\n";
    }
    if (!c.repro.empty()) s += fmt::format("<p>repro bundle: <code>{}</code></p>\n", esc(c.repro));
    if (!c.log_tail.empty()) s += fmt::format("<pre class=\"log\">{}</pre>\n", esc(c.log_tail));
    std::string passing;
    for (size_t j = 0; j < c.tensors.size(); ++j) {
      const auto& t = c.tensors[j];
      if (t.verdict == Verdict::Passed)
        passing += fmt::format("<li>{}: passed with margin {} allowed (max error / allowed)</li>", esc(t.name), ratio_str(t.max_ratio));
      else
        s += tensor_section(t, fmt::format("case-{}-t{}", k, j), t.error_profile && plotted++ < kMaxPlotted);
    }
    if (!passing.empty()) s += "<ul class=\"passing-list\">" + passing + "</ul>\n";
    s += "</section>\n";
  }
  // Passing cases: every tensor's margin, compactly.
  bool any_pass = false;
  for (const auto& c : r.cases) any_pass = any_pass || c.verdict == Verdict::Passed;
  if (any_pass) {
    s += "<h2>Margins of the passing cases</h2>\n<table id=\"margins\">";
    for (const auto& c : r.cases) {
      if (c.verdict != Verdict::Passed) continue;
      std::string m;
      for (const auto& t : c.tensors) m += fmt::format("{}{} {}", m.empty() ? "" : ", ", esc(t.name), ratio_str(t.max_ratio));
      s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", esc(c.kernel), esc(c.op + "/" + c.case_name), m);
    }
    s += "</table>\n";
  }
  s += "</body>\n</html>\n";
  return s;
}

void write_text_file(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  check_output_path(path, "");  // a device, FIFO, link or an input of the run is never replaced
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw InputError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw InputError(fmt::format("{}: cannot write: {}", path, std::strerror(ok ? errno : err)));
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw InputError(fmt::format("{}: cannot write: {}", path, ec.message()));
  }
}

}  // namespace assay
