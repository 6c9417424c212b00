// assay inspect FILE...: what a golden holds (provenance, inputs, outputs, bounds, intermediates).
// --decode OUT: the C++ codecs' fp64 values of every input's storage codes (/inputs/<name>) and the
// expected outputs (/expected/<name>), for checking another decoder (python/assay) bit for bit.
// OUT is the file (one golden, OUT ends in .h5) or a directory that gets OUT/<op>/<case>.h5.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "verify/cli/cli.h"
#include "verify/io/safe_files.h"
#include "reference/core/check.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/judge/verdict.h"

namespace assay::cli {
namespace {

std::string axes_str(const std::vector<std::string>& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? "," : "") + a[i];
  return s + "]";
}

// "normal a=0 b=1 scale=1 specials=nan*2" (the stream and seed are the golden's own).
std::string recipe_str(const gen::Recipe& r) {
  std::string s = fmt::format("{} a={} b={} scale={}", printable(r.dist.kind), r.dist.a, r.dist.b, r.dist.scale);
  for (size_t k = 0; k < r.dist.specials.size(); ++k)
    s += fmt::format("{}{}*{}", k ? "," : " specials=", printable(r.dist.specials[k].value), r.dist.specials[k].count);
  return s;
}

nlohmann::json to_json(const std::string& path, const Golden& g) {
  const auto& p = g.prov;
  nlohmann::json j{{"file", path}, {"schema_version", p.schema_version}, {"op", p.op}, {"case", p.case_name},
                   {"level", p.level}, {"seed", p.seed}, {"rng", p.rng}, {"generator", p.generator},
                   {"git_rev", p.git_rev}, {"compiler", p.compiler}, {"case_toml", p.case_toml},
                   {"content_fnv1a64", g.recorded_content_hash}};
  if (!g.recipe_stale.empty()) j["stale"] = g.recipe_stale;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const auto& t = g.inputs[i];
    nlohmann::json in{{"name", t.name}, {"dtype", name(t.dtype)}, {"shape", t.shape}, {"axes", t.axes},
                      {"fnv1a64", g.input_hashes[i]}, {"storage", input_is_recipe(g, i) ? "recipe" : "values"}};
    if (input_is_recipe(g, i)) {
      const auto& r = *g.input_recipes[i];
      nlohmann::json sp = nlohmann::json::array();
      for (const auto& x : r.dist.specials) sp.push_back({{"value", x.value}, {"count", x.count}});
      in["recipe"] = {{"stream", r.stream}, {"seed", r.seed}, {"kind", r.dist.kind}, {"a", r.dist.a}, {"b", r.dist.b},
                      {"scale", r.dist.scale}, {"specials", sp}};
    }
    j["inputs"].push_back(in);
  }
  for (const auto& o : g.outputs)
    j["outputs"].push_back({{"name", o.expected.name}, {"dtype", name(o.expected.dtype)}, {"shape", o.expected.shape},
                            {"axes", o.expected.axes}, {"bound", o.bound.has_value()}, {"bound2", o.bound2.has_value()},
                            {"rounded", o.rounded.has_value()}, {"allow_nonfinite", o.allow_nonfinite},
                            {"single_form_reason", g.single_form.count(o.expected.name) ? g.single_form.at(o.expected.name) : ""}});
  for (const auto& t : g.intermediates)
    j["intermediates"].push_back({{"name", t.name}, {"shape", t.shape}, {"axes", t.axes}, {"dtype", std::string(name(t.dtype))},
                                  {"bound", g.intermediate_bounds.count(t.name) > 0}});
  j["case_fields"] = nlohmann::json::object();
  for (const auto& [k, v] : g.case_fields.all())
    std::visit([&, k = k](const auto& x) { j["case_fields"][k] = x; }, v);
  for (const auto& a : g.agreement)
    j["agreement"].push_back({{"tensor", a.tensor}, {"forms", a.form_a + " vs " + a.form_b}, {"max_rel", a.max_rel}});
  return j;
}

void print(const std::string& path, const Golden& g) {
  const auto& p = g.prov;
  // Provenance strings come from the file: printed through printable() (no raw control characters).
  fmt::print("{}\n  op {}  case {}  level {}  seed {}  schema v{}\n  rng {}  generator {}  git {}  compiler {}\n  content_fnv1a64 {}\n",
             printable(path), printable(p.op), printable(p.case_name), printable(p.level), p.seed, p.schema_version,
             printable(p.rng), printable(p.generator), printable(p.git_rev), printable(p.compiler),
             g.recorded_content_hash.empty() ? "(none)" : printable(g.recorded_content_hash));
  fmt::print("  inputs:\n");
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const auto& t = g.inputs[i];
    fmt::print("    {:<14} {:<8} {:<22} {:<14} fnv1a64={}{}\n", t.name, name(t.dtype), shape_str(t.shape), axes_str(t.axes),
               g.input_hashes[i], input_is_recipe(g, i) ? fmt::format("  recipe: {}", recipe_str(*g.input_recipes[i])) : "");
  }
  fmt::print("  outputs (fp64 truth; dtype = kernel-facing):\n");
  if (!g.sample.empty())
    fmt::print("    sampled: only {} (golden/SCHEMA.md \"Sampled outputs\"); a kernel writes the whole shapes below\n",
               printable(sample_summary(g.sample)));
  for (const auto& o : g.outputs)
    fmt::print("    {:<14} {:<8} {:<22} {:<14}{}{}{}{}\n", o.expected.name, name(o.expected.dtype),
               shape_str(o.sampled ? o.full_shape : o.expected.shape), axes_str(o.sampled ? o.full_axes : o.expected.axes),
               o.bound ? " +bound" : "", o.bound2 ? " +bound2" : "", o.rounded ? " +rounded" : "",
               o.sampled ? fmt::format("  ({} sampled elements)", o.expected.size()) : "");
  for (const auto& [n, why] : g.single_form) fmt::print("    {}: one oracle form only: {}\n", printable(n), printable(why));
  if (!g.intermediates.empty()) {
    fmt::print("  intermediates:\n");
    for (const auto& t : g.intermediates)
      fmt::print("    {:<14} {:<22} {:<18} {}{}\n", t.name, shape_str(t.shape), axes_str(t.axes), name(t.dtype),
                 g.intermediate_bounds.count(t.name) ? "  bound" : "");
  }
  fmt::print("  case fields (resolved, what kernels see):\n");
  const auto fields = g.case_fields.str();
  for (size_t s = 0, e; s < fields.size(); s = e + 1) {
    e = fields.find('\n', s);
    fmt::print("    {}\n", printable(fields.substr(s, e - s)));
  }
  fmt::print("  oracle agreement:\n");
  for (const auto& a : g.agreement)
    fmt::print("    {:<14} {} vs {}: {:.3e}\n", printable(a.tensor), printable(a.form_a), printable(a.form_b), a.max_rel);
  fmt::print("  case:\n");
  for (size_t s = 0, e; s < p.case_toml.size(); s = e + 1) {
    e = p.case_toml.find('\n', s);
    if (e == std::string::npos) e = p.case_toml.size();
    fmt::print("    {}\n", printable(p.case_toml.substr(s, e - s)));
  }
}

void write_decoded(const std::string& out, const Golden& g) {
  namespace fs = std::filesystem;
  check_output_path(out, "--decode");
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  const std::string tmp = out + ".tmp." + std::to_string(::getpid());
  try {
    auto f = h5::File::create(tmp);
    f.set_attr("/", "op", g.prov.op);
    f.set_attr("/", "case", g.prov.case_name);
    f.create_group("/inputs");
    f.create_group("/expected");
    for (const auto& t : g.inputs) {
      f.write("/inputs/" + t.name, h5::Elem::f64, t.shape, t.data.data());
      f.set_attr("/inputs/" + t.name, "dtype", std::string(name(t.dtype)));
    }
    for (const auto& o : g.outputs) {
      f.write("/expected/" + o.expected.name, h5::Elem::f64, o.expected.shape, o.expected.data.data());
      f.set_attr("/expected/" + o.expected.name, "dtype", std::string(name(o.expected.dtype)));
    }
    f.close();
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fs::rename(tmp, out);
}

}  // namespace

void add_inspect(CLI::App& app, Common& common, int& rc) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto* s = app.add_subcommand("inspect", "Show the cases, shapes, dtypes and provenance of goldens");
  s->add_option("files", *files, "Golden .h5 files")->required();
  s->add_flag("--json", common.json, "JSON on stdout");
  auto decode = std::make_shared<std::string>();
  s->add_option("--decode", *decode,
                "Write the decoded fp64 inputs and expected outputs: to this .h5 (one golden) or DIR/<op>/<case>.h5");
  s->callback([files, decode, &common, &rc] {
    namespace fs = std::filesystem;
    const bool one_file = decode->size() > 3 && decode->substr(decode->size() - 3) == ".h5";
    if (!decode->empty() && !one_file) {  // a directory: an existing file there is a usage error, not a crash
      std::error_code ec;
      const auto st = fs::symlink_status(*decode, ec);
      if (!ec && fs::exists(st) && !fs::is_directory(st))
        throw InputError(fmt::format("--decode {}: exists and is not a directory (name a directory, or a .h5 file for one golden)",
                                     *decode));
    }
    for (const auto& f : *files) note_input(f);
    if (one_file && files->size() != 1)
      throw InputError(fmt::format("--decode {}: a .h5 target takes one golden ({} given); give a directory", *decode, files->size()));
    nlohmann::json all = nlohmann::json::array();
    std::vector<std::string> stale;  // inputs regenerated from recipes that no longer hash as recorded
    for (const auto& f : *files) {
      // Only --decode writes the inputs' values; a listing hashes recipe inputs a block at a time.
      const auto g = read_golden(f, !decode->empty());
      if (!g.recipe_stale.empty()) stale.push_back(g.recipe_stale);
      if (!decode->empty()) {
        if (!g.recipe_stale.empty()) throw InputError(g.recipe_stale);  // never decode a Stale input
        write_decoded(one_file ? *decode : (fs::path(*decode) / g.prov.op / (g.prov.case_name + ".h5")).string(), g);
        continue;
      }
      if (common.json) all.push_back(to_json(f, g));
      else print(f, g);
    }
    if (!decode->empty()) {
      rc = kExitPass;
      return;
    }
    if (common.json) std::cout << all.dump(2) << "\n";
    rc = kExitPass;
    // Shown whole above, but Stale is an error: one line each, exit 2.
    for (const auto& r : stale) fmt::print(stderr, "Stale: {}\n", printable(r));
    if (!stale.empty()) rc = kExitInput;
  });
}

}  // namespace assay::cli
