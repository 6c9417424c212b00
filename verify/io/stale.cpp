#include "verify/io/stale.h"

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "fixtures/gen/inputs.h"
#include "fixtures/gen/op.h"
#include "reference/core/check.h"
#include "reference/core/toml_text.h"

namespace assay {

static std::string rstrip_lines(const std::string& s) {
  std::string out, line;
  for (char c : s + "\n") {
    if (c == '\n') {
      while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
      out += line + "\n";
      line.clear();
    } else {
      line += c;
    }
  }
  while (out.size() > 1 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n') out.pop_back();
  return out;
}

// The provenance must agree with the case text it records: the seed and the name.
static StaleResult check_case_text(const Golden& g) {
  toml::table doc;
  try {
    doc = parse_toml(g.prov.case_toml, "attribute case_toml");
  } catch (const InputError& e) {
    return {true, fmt::format("attribute case_toml does not parse as a [[case]] block ({})", e.what())};
  }
  const auto* arr = doc["case"].as_array();
  const auto* c = arr && arr->size() == 1 ? arr->get(0)->as_table() : nullptr;
  if (!c) return {true, "attribute case_toml is not one [[case]] block"};
  const auto name = (*c)["name"].value<std::string>();
  if (name != g.prov.case_name)
    return {true, fmt::format("attribute case = '{}' but case_toml names '{}'", g.prov.case_name, name.value_or("(none)"))};
  const auto seed = (*c).contains("seed") ? (*c)["seed"].value<int64_t>() : std::optional<int64_t>(0);  // fixtures: default 0
  if (!seed || *seed < 0 || static_cast<uint64_t>(*seed) != g.prov.seed)
    return {true, fmt::format("attribute seed = {} but case_toml says seed = {}", g.prov.seed,
                              seed ? std::to_string(*seed) : std::string("(none)"))};
  return {};
}

// The fixtures of this run, each parsed once (a directory of 100 goldens against a 10,000-case
// fixture parsed it 100 times). Keyed by path, size and modification time, so an edited fixture
// is read again.
static std::shared_ptr<const gen::Fixture> cached_fixture(const std::string& path) {
  static std::mutex m;
  static std::map<std::string, std::pair<std::string, std::shared_ptr<const gen::Fixture>>> cache;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto mtime = std::filesystem::last_write_time(path, ec);
  const std::string key = fmt::format("{}:{}", ec ? 0 : size, ec ? 0 : mtime.time_since_epoch().count());
  std::lock_guard<std::mutex> lk(m);
  auto& slot = cache[path];
  if (!slot.second || slot.first != key) slot = {key, std::make_shared<const gen::Fixture>(gen::load_fixture(path))};
  return slot.second;
}

StaleResult check_stale(const Golden& g, const std::string& fixtures_dir) {
  // Inputs stored as recipes were regenerated and hashed by read_golden.
  if (!g.recipe_stale.empty()) return {true, g.recipe_stale};
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (input_is_recipe(g, i)) continue;
    const auto h = gen::input_hash(g.inputs[i]);
    if (h != g.input_hashes[i])
      return {true, fmt::format("input '{}': stored bits hash to {} but the golden recorded {}", g.inputs[i].name, h,
                                g.input_hashes[i])};
  }
  for (const auto& [ds, h] : golden_hashes(g)) {
    const auto it = g.recorded_hashes.find(ds);
    if (it == g.recorded_hashes.end())
      return {true, fmt::format("{}: no recorded fnv1a64 (edited after generation, or not written by assay gen)", ds)};
    if (it->second != h)
      return {true, fmt::format("{}: values or attributes hash to {} but the golden recorded {} (edited after generation)", ds,
                                h, it->second)};
  }
  if (g.recorded_content_hash.empty())
    return {true, "no root attribute content_fnv1a64 (edited after generation, or not written by assay gen)"};
  if (const auto h = content_hash(g); h != g.recorded_content_hash)
    return {true, fmt::format("root attributes, input attributes or the list of datasets hash to {} but the golden recorded {} "
                              "(edited after generation)",
                              h, g.recorded_content_hash)};
  if (auto r = check_case_text(g); r.stale) return r;
  // A bisect repro bundle is a slice of a golden (verify/bisect/bisect.h): its own hashes above are all
  // that can be checked; the fixture would regenerate the full case.
  if (fixtures_dir.empty() || g.prov.level == "bisect") return {};
  const std::string path = (std::filesystem::path(fixtures_dir) / (g.prov.op + ".toml")).string();
  if (!std::filesystem::exists(path)) return {true, fmt::format("fixture {} no longer exists", path)};
  const auto fxp = cached_fixture(path);  // parsed once per run, not once per golden
  const auto& fx = *fxp;
  const auto* c = fx.find(g.prov.case_name);
  if (!c) return {true, fmt::format("{}: case '{}' no longer exists", path, g.prov.case_name)};
  if (rstrip_lines(c->text) != rstrip_lines(g.prov.case_toml))
    return {true, fmt::format("{}: case '{}' text changed since the golden was generated (regenerate: assay gen --op {})",
                              path, c->name, g.prov.op)};
  const auto* op = gen::find_op(g.prov.op);
  if (!op) return {true, fmt::format("op '{}' is not built into this assay", g.prov.op)};
  const auto set = gen::generate_input_set(*op, *c);
  const auto& fresh = set.tensors;
  if (fresh.size() != g.inputs.size())
    return {true, fmt::format("{}: case '{}' now generates {} inputs, the golden has {}", path, c->name, fresh.size(),
                              g.inputs.size())};
  for (size_t fi = 0; fi < fresh.size(); ++fi) {
    const auto& t = fresh[fi];
    const auto* old = g.input(t.name);
    if (!old) return {true, fmt::format("input '{}' is generated by the fixture but missing from the golden", t.name)};
    const auto idx = static_cast<size_t>(old - g.inputs.data());
    // A lazy input (a sampled case's big one): the same recipe as the golden's is the same tensor
    // (read_golden checked its regenerated codes against the recorded hash); else hash it.
    if (set.lazy[fi] && input_is_recipe(g, idx) && *g.input_recipes[idx] == *set.recipes[fi]) continue;
    const auto h = set.lazy[fi] ? gen::recipe_hash(*set.recipes[fi], t.name, [&](std::string_view f, std::string_view m) {
      c->fail(f, m);
    })
                                : gen::input_hash(t);
    if (h != g.input_hashes[idx])
      return {true, fmt::format("input '{}': the fixture now generates hash {}, the golden has {} (regenerate: assay gen --op {})",
                                t.name, h, g.input_hashes[idx], g.prov.op)};
  }
  return {};
}

}  // namespace assay
