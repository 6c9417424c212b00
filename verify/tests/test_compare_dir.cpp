// `assay compare --golden-dir/--candidate-dir`, the report files of compare (--json-file, --junit,
// --html, repro bundles), the error profile behind the HTML plots, and `inspect --decode`.
#include <cmath>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "catch_compat.h"
#include "verify/judge/error_profile.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/tests/cli_helpers.h"
#include "verify/judge/tolerance.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {
using assay_test::Contains;
using assay_test::slurp;
assay_test::Run run(const std::string& args) { return assay_test::run_assay(args); }

const fs::path kSsd = fs::path(ASSAY_SOURCE_DIR) / "golden" / "ssd";

// A candidate with the golden's outputs rounded to their dtypes, stored as float32 (as torch writes
// them); `edit(output, flat index, value)` may change any value.
void write_candidate(const fs::path& path, const Golden& g,
                     const std::function<double(const Output&, size_t, double)>& edit = nullptr) {
  auto h = h5::File::create(path.string());
  h.create_group("/outputs");
  for (const auto& o : g.outputs) {
    std::vector<float> v(o.expected.data.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const double x = round_to(o.expected.dtype, o.expected.data[i]);
      v[i] = static_cast<float>(edit ? edit(o, i, x) : x);
    }
    h.write("/outputs/" + o.expected.name, h5::Elem::f32, o.expected.shape, v.data());
  }
}

int64_t axis_of(const Tensor& t, const std::string& a) {
  for (size_t d = 0; d < t.axes.size(); ++d)
    if (t.axes[d] == a) return static_cast<int64_t>(d);
  return -1;
}

}  // namespace

TEST_CASE("error profile: a planted error shows at its sequence positions and its (batch·head, tile) cell", "[cpu][L0]") {
  Output o;
  o.expected.name = "out";
  o.expected.axes = {"B", "T", "H", "D"};
  o.expected.shape = {2, 300, 3, 4};
  o.expected.dtype = DType::f32;
  o.expected.data.resize(2 * 300 * 3 * 4);
  for (size_t i = 0; i < o.expected.data.size(); ++i) o.expected.data[i] = std::sin(0.01 * static_cast<double>(i)) + 2.0;
  Tolerance tol;
  tol.atol = 1e-3;
  std::vector<double> a = o.expected.data;
  // Planted: b = 1, h = 2, t in [200, 210), d = 1: error 10x allowed. Elsewhere half of allowed.
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 300; ++t)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t d = 0; d < 4; ++d) {
          const size_t i = static_cast<size_t>(((b * 300 + t) * 3 + h) * 4 + d);
          a[i] += (b == 1 && h == 2 && t >= 200 && t < 210 && d == 1) ? 1e-2 : 5e-4;
        }
  const auto p = error_profile(o, tol, a);
  REQUIRE(p.seq_axis == "T");
  REQUIRE(p.seq_len == 300);
  REQUIRE(p.seq_bin == 1);
  REQUIRE(p.seq_max_ratio.size() == 300);
  for (int64_t t = 0; t < 300; ++t) {
    INFO("t=" << t << " ratio " << p.seq_max_ratio[static_cast<size_t>(t)]);
    if (t >= 200 && t < 210) CHECK(p.seq_max_ratio[static_cast<size_t>(t)] == Approx(10.0).epsilon(1e-3));
    else CHECK(p.seq_max_ratio[static_cast<size_t>(t)] == Approx(0.5).epsilon(1e-3));
  }
  REQUIRE(p.row_axes == "B\u00b7H");
  REQUIRE(p.rows == 6);
  REQUIRE(p.tile == 8);  // smallest power of two giving <= 64 tiles of 300
  REQUIRE(p.cols == 38);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c) {
      const double v = p.heat[static_cast<size_t>(r * p.cols + c)];
      const bool hit = r == 1 * 3 + 2 && c * 8 < 210 && (c + 1) * 8 > 200;  // tiles 25 and 26 of row b=1,h=2
      INFO("row " << r << " col " << c);
      CHECK((v > 1) == hit);
    }
  REQUIRE(p.over == 10);
  // Without a sequence axis: one row per (batch, head), positions over the other axes.
  Output st;
  st.expected.name = "final_state";
  st.expected.axes = {"B", "HV", "K", "V"};
  st.expected.shape = {2, 3, 4, 5};
  st.expected.dtype = DType::f32;
  st.expected.data.assign(120, 1.0);
  std::vector<double> sa = st.expected.data;
  sa[static_cast<size_t>(((1 * 3 + 2) * 4 + 3) * 5 + 4)] += 1.0;  // b=1, hv=2, k=3, v=4
  const auto ps = error_profile(st, tol, sa);
  REQUIRE(ps.seq_axis == "K\u00b7V");
  REQUIRE(ps.seq_len == 20);
  REQUIRE(ps.rows == 6);
  for (size_t k = 0; k < ps.seq_max_ratio.size(); ++k) CHECK((ps.seq_max_ratio[k] > 1) == (k == 19));
  for (int64_t r = 0; r < ps.rows; ++r)
    for (int64_t c = 0; c < ps.cols; ++c) CHECK((ps.heat[static_cast<size_t>(r * ps.cols + c)] > 1) == (r == 5 && c == ps.cols - 1));
  int64_t total = p.zero + p.infinite;
  for (auto c : p.hist) total += c;
  REQUIRE(total == p.n);
}

TEST_CASE("compare --golden-dir pairs by case: Passed, Incorrect with repro, NotRun, Failed from .error and bad files", "[cpu][L0]") {
  const auto d = assay_test::fresh_dir("assay_test_compare_dir", "mixed");
  const auto cand = d / "cands";
  fs::create_directories(cand);
  const auto g_t1000 = read_golden((kSsd / "t1000_q64.h5").string());
  const auto g_t300 = read_golden((kSsd / "t300_q256.h5").string());
  const auto g_fp32 = read_golden((kSsd / "fp32_t130.h5").string());
  // Exact: passes. Planted: `out` drifts from t = 512 on in head 1 (grows with t).
  write_candidate(cand / "t300_q256.h5", g_t300);
  const int64_t planted_t = 512;
  write_candidate(cand / "t1000_q64.h5", g_t1000, [&](const Output& o, size_t i, double x) {
    if (o.expected.name != "out") return x;
    const auto idx = o.expected.unravel(static_cast<int64_t>(i));
    const auto t = idx[static_cast<size_t>(axis_of(o.expected, "T"))];
    const auto h = idx[static_cast<size_t>(axis_of(o.expected, "H"))];
    return (h == 1 && t >= planted_t) ? x * (1.0 + 1e-4 * static_cast<double>(t - planted_t + 1)) : x;
  });
  // A wrong shape: the one-line error of the single-file mode becomes this case's Failed.
  {
    auto h = h5::File::create((cand / "fp32_t130.h5").string());
    h.create_group("/outputs");
    std::vector<float> v(3, 0.f);
    for (const auto& o : g_fp32.outputs) h.write("/outputs/" + o.expected.name, h5::Elem::f32, {3}, v.data());
  }
  // The producer failed (Python's assay.check writes the traceback here).
  std::ofstream(cand / "t1_q16.error") << "RuntimeError: CUDA error: an illegal memory access (raised by mypkg:fwd)\n"
                                          "Traceback (most recent call last):\n  File \"k.py\", line 3\n";
  write_candidate(cand / "t300_q265.h5", g_t300);  // a misspelt case: noted, not judged
  const auto html = d / "report.html", junit = d / "junit.xml", json = d / "report.json";
  auto r = run("compare --golden-dir " + kSsd.string() + " --candidate-dir " + cand.string() +
               " --case t1000_q64 --case t300_q256 --case fp32_t130 --case t1_q16 --case dt_limit --name mykernel --html " +
               html.string() + " --junit " + junit.string() + " --json-file " + json.string());
  INFO(r.out);
  REQUIRE(r.code == 1);
  const auto j = nlohmann::json::parse(slurp(json));
  REQUIRE(j["tool"] == "compare");
  REQUIRE(j["exit_code"] == 1);
  REQUIRE(j["cases"].size() == 5);
  REQUIRE(j["notes"].size() == 1);
  CHECK_THAT(j["notes"][0].get<std::string>(), Contains("t300_q265.h5: no golden"));
  CHECK_THAT(r.out, Contains("note: "));
  std::map<std::string, nlohmann::json> by;
  for (const auto& c : j["cases"]) by[c["case"].get<std::string>()] = c;
  CHECK(by["t300_q256"]["verdict"] == "Passed");
  CHECK(by["dt_limit"]["verdict"] == "NotRun");
  CHECK(by["t1_q16"]["verdict"] == "Failed");
  CHECK_THAT(by["t1_q16"]["reason"].get<std::string>(), Contains("RuntimeError: CUDA error: an illegal memory access"));
  CHECK_THAT(by["t1_q16"]["log_tail"].get<std::string>(), Contains("line 3"));
  CHECK(by["fp32_t130"]["verdict"] == "Failed");
  CHECK_THAT(by["fp32_t130"]["reason"].get<std::string>(), Contains("wrong shape"));
  const auto& bad = by["t1000_q64"];
  REQUIRE(bad["verdict"] == "Incorrect");
  CHECK(bad["kernel"] == "mykernel");
  REQUIRE(fs::exists(bad["repro"].get<std::string>()));
  CHECK(fs::path(bad["repro"].get<std::string>()).parent_path() == fs::path(d / "repro").lexically_normal());
  // The error profile puts the first bad position at or after the planted one, none before.
  nlohmann::json out_t;
  for (const auto& t : bad["tensors"])
    if (t["name"] == "out") out_t = t;
  REQUIRE(out_t["verdict"] == "Incorrect");
  const auto& seq = out_t["error_profile"]["seq_max_ratio"];
  REQUIRE(out_t["error_profile"]["seq_axis"] == "T");
  REQUIRE(seq.size() == 500);  // T = 1000 in groups of 2
  int64_t first_bad_bin = -1;
  for (size_t k = 0; k < seq.size(); ++k)
    if (seq[k].is_null() || seq[k].get<double>() > 1) {
      first_bad_bin = static_cast<int64_t>(k);
      break;
    }
  REQUIRE(first_bad_bin * 2 >= planted_t);
  CHECK_THAT(bad["reason"].get<std::string>(), Contains("'out':"));
  // Passing tensors carry no profile (the report stays small); their margin is max_ratio.
  for (const auto& t : by["t300_q256"]["tensors"]) CHECK_FALSE(t.contains("error_profile"));

  const auto ju = slurp(junit);
  CHECK_THAT(ju, Contains("<failure type=\"Incorrect\""));
  CHECK_THAT(ju, Contains("<error type=\"Failed\""));
  CHECK_THAT(ju, Contains("<skipped message=\"NotRun: no candidate"));

  const auto h = slurp(html);
  CHECK_THAT(h, Contains("<table id=\"verdicts\">"));
  CHECK_THAT(h, Contains("class=\"seq-plot\""));
  CHECK_THAT(h, Contains("class=\"heatmap\""));
  CHECK_THAT(h, Contains("class=\"hist\""));
  CHECK_THAT(h, Contains("first mismatch"));
  CHECK_THAT(h, Contains(out_t["first_mismatch"].get<std::string>()));
  CHECK_THAT(h, Contains(assay_test::html_escaped(out_t["tolerance"]["why"].get<std::string>())));
  CHECK_THAT(h, Contains("Margins of the passing cases"));
  // Self-contained: nothing fetched.
  for (const char* fetch : {"<script", "<link", " src=", "url(", "@import"}) {
    INFO(fetch);
    CHECK(h.find(fetch) == std::string::npos);
  }
}

TEST_CASE("compare: single-pair report files and repro bundle, --golden-dir usage errors are one line, exit 2", "[cpu][L0]") {
  const auto d = assay_test::fresh_dir("assay_test_compare_dir", "single");
  const auto g = read_golden((kSsd / "t300_q256.h5").string());
  write_candidate(d / "c.h5", g, [](const Output&, size_t i, double x) { return i == 5 ? x + 10 : x; });
  auto r = run("compare " + (kSsd / "t300_q256.h5").string() + " " + (d / "c.h5").string() + " --work-dir " +
               (d / "repro").string() + " --html " + (d / "r.html").string() + " --junit " + (d / "j.xml").string() +
               " --json-file " + (d / "r.json").string());
  INFO(r.out);
  REQUIRE(r.code == 1);
  CHECK_THAT(r.out, Contains("repro bundle: "));
  REQUIRE(fs::exists(d / "repro"));
  CHECK_FALSE(fs::is_empty(d / "repro"));
  CHECK_THAT(slurp(d / "r.html"), Contains("class=\"heatmap\""));
  CHECK_THAT(slurp(d / "j.xml"), Contains("<failure type=\"Incorrect\""));
  CHECK(nlohmann::json::parse(slurp(d / "r.json"))["cases"][0]["verdict"] == "Incorrect");

  const std::string gd = " --golden-dir " + kSsd.string(), cd = " --candidate-dir " + d.string();
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {gd, "--golden-dir needs --candidate-dir"},
           {cd, "--candidate-dir needs --golden-dir"},
           {gd + " --candidate-dir " + (d / "nope").string(), "nope: not a directory"},
           {gd + cd + " --case 'zzz*'", "no golden matches --case"},
           {gd + cd + " " + (kSsd / "t300_q256.h5").string(), "not both"},
           {(kSsd / "t300_q256.h5").string() + " " + (d / "c.h5").string() + " --case x", "--case applies to --golden-dir only"}}) {
    auto e = run("compare " + args);
    INFO(args << "\n" << e.out);
    CHECK(e.code == 2);
    CHECK_THAT(e.out, Contains(want));
    CHECK(std::count(e.out.begin(), e.out.end(), '\n') == 1);
  }
}

TEST_CASE("inspect --decode writes the C++ codecs' values of every input and expected output", "[cpu][L0]") {
  const auto d = assay_test::fresh_dir("assay_test_compare_dir", "decode");
  const auto gp = (fs::path(ASSAY_SOURCE_DIR) / "golden" / "scaled_add" / "specials_fp16.h5").string();
  auto r = run("inspect " + gp + " --decode " + (d / "one.h5").string());
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto g = read_golden(gp);
  const auto f = h5::File::open_read((d / "one.h5").string());
  for (const auto& t : g.inputs) {
    const auto v = f.read_f64("/inputs/" + t.name);
    REQUIRE(v.size() == t.data.size());
    for (size_t i = 0; i < v.size(); ++i) {
      INFO(t.name << "[" << i << "]");
      REQUIRE((std::isnan(v[i]) ? std::isnan(t.data[i]) : std::signbit(v[i]) == std::signbit(t.data[i]) && v[i] == t.data[i]));
    }
  }
  auto many = run("inspect " + (fs::path(ASSAY_SOURCE_DIR) / "golden" / "scaled_add").string() + "/int_exact.h5 " + gp +
                  " --decode " + (d / "dir").string());
  REQUIRE(many.code == 0);
  CHECK(fs::exists(d / "dir" / "scaled_add" / "int_exact.h5"));
  CHECK(fs::exists(d / "dir" / "scaled_add" / "specials_fp16.h5"));
  auto bad = run("inspect " + gp + " " + gp + " --decode " + (d / "x.h5").string());
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Contains("a .h5 target takes one golden"));
}

TEST_CASE("bisect GOLDEN CANDIDATE prints the first bad position and its chunk, usage errors are one line", "[cpu][L0]") {
  const auto d = assay_test::fresh_dir("assay_test_compare_dir", "bisect");
  const auto gp = (kSsd / "t1000_q64.h5").string();
  const auto g = read_golden(gp);
  write_candidate(d / "exact.h5", g);
  auto ok = run("bisect " + gp + " " + (d / "exact.h5").string());
  INFO(ok.out);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Contains("every output within tolerance"));
  // Wrong from t = 700 (chunk 10 of 64) on, in every head.
  write_candidate(d / "bad.h5", g, [](const Output& o, size_t i, double x) {
    if (o.expected.name != "out") return x;
    return o.expected.unravel(static_cast<int64_t>(i))[static_cast<size_t>(axis_of(o.expected, "T"))] >= 700 ? x * 1.1 + 0.5 : x;
  });
  auto bad = run("bisect " + gp + " " + (d / "bad.h5").string());
  INFO(bad.out);
  CHECK(bad.code == 1);
  CHECK_THAT(bad.out, Contains("first bad: out at T=700 of 1000"));
  CHECK_THAT(bad.out, Contains("= chunk 10 x 64 + 60"));
  CHECK_THAT(bad.out, Contains("T 0..699 within"));
  auto js = run("bisect --json " + gp + " " + (d / "bad.h5").string());
  const auto j = nlohmann::json::parse(js.out);
  CHECK(j["outputs"][0]["first_bad_pos"] == 700);
  CHECK(j["outputs"][0]["chunk"] == 10);
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {gp, "give GOLDEN CANDIDATE"},
           {gp + " " + (d / "bad.h5").string() + " --kernel k", "--kernel, --plugin, --candidate-cmd and --case apply to bisect --git"},
           {"--git a b --json", "apply to bisect GOLDEN CANDIDATE"}}) {
    auto e = run("bisect " + args);
    INFO(args << "\n" << e.out);
    CHECK(e.code == 2);
    CHECK_THAT(e.out, Contains(want));
    CHECK(std::count(e.out.begin(), e.out.end(), '\n') == 1);
  }
}
