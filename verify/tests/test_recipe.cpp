// Inputs stored as recipes (golden/SCHEMA.md "Inputs by recipe"): written by gen's packing, read
// back by regenerating them with the fixture's own generator (gen::realize), and Stale when the
// regenerated codes no longer hash to the recorded fnv1a64.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/ranges.h>

#include "catch_compat.h"
#include "fixtures/gen/op.h"
#include "reference/core/check.h"
#include "tests/common.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/io/stale.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {

fs::path test_dir(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("assay_test_recipe_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// One scaled_add case "c" in <dir>/fixtures/scaled_add.toml: bf16 x with specials (normal, so the
// polar method's rejections are exercised), fp16 y of small integers. `extra` is appended.
std::string write_fixture(const fs::path& dir, const std::string& extra) {
  const auto fx = dir / "fixtures";
  fs::create_directories(fx);
  std::ofstream(fx / "scaled_add.toml")
      << "op = \"scaled_add\"\n[[case]]\nname = \"c\"\nlevel = \"L0\"\nseed = 11\nB = 2\nT = 33\nD = 40\nalpha = 0.5\n"
         "beta = 2.0\ndtype = { x = \"bf16\", y = \"fp16\", out = \"fp32\" }\n"
         "dist.x = { kind = \"normal\", mean = 0.25, std = 3, scale = 2, specials = [{ value = \"subnormal\", count = 2 }, "
         "{ value = \"-zero\", count = 3 }, { value = \"max\", count = 1 }] }\n"
         "dist.y = { kind = \"int\", lo = -5, hi = 9 }\n"
      << extra;
  return fx.string();
}

// What `assay gen` writes for the case (verify/cli/cmd_gen.cpp pack), without the CLI.
Golden gen_golden(const std::string& fixtures_dir) {
  const auto fx = gen::load_fixture((fs::path(fixtures_dir) / "scaled_add.toml").string());
  const auto& c = fx.cases.at(0);
  const auto* op = gen::find_op("scaled_add");
  REQUIRE(op != nullptr);
  auto g = gen::generate_case(*op, c);
  Golden gd;
  gd.prov.op = c.op;
  gd.prov.case_name = c.name;
  gd.prov.level = c.level;
  gd.prov.case_toml = c.text;
  gd.prov.seed = c.seed;
  for (const auto& t : g.inputs) gd.input_hashes.push_back(gen::input_hash(t));
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (g.store_as_recipe(i)) {
      gd.input_recipes.resize(g.inputs.size());
      gd.input_recipes[i] = g.recipes[i];
    }
  gd.inputs = std::move(g.inputs);
  gd.outputs = std::move(g.result.outputs);
  gd.agreement = std::move(g.result.agreement);
  gd.single_form = std::move(g.result.single_form);
  gd.case_fields = c.resolved();
  return gd;
}

std::vector<uint8_t> codes(const Golden& g, const std::string& name) { return gen::storage_bytes(*g.input(name)); }

}  // namespace

TEST_CASE("a recipe golden round-trips: regenerated codes equal the values golden's", "[cpu][L0]") {
  const auto dir = test_dir("rt");
  const auto fx_values = write_fixture(dir / "v", "");
  const auto fx_recipe = write_fixture(dir / "r", "inputs = \"recipe\"\n");
  const auto gv = gen_golden(fx_values);
  const auto gr = gen_golden(fx_recipe);
  REQUIRE(gv.input_recipes.empty());
  REQUIRE(gr.input_recipes.size() == 2);
  REQUIRE(written_schema_version(gv) == kSchemaVersion);
  REQUIRE(written_schema_version(gr) == kSchemaVersionRecipe);
  const auto pv = (dir / "values.h5").string(), pr = (dir / "recipe.h5").string();
  write_golden(pv, gv);
  write_golden(pr, gr);
  {
    auto f = h5::File::open_read(pr);
    CHECK(f.is_group("/inputs/x"));
    CHECK(f.is_group("/inputs/y"));
    CHECK(f.attr_int("/", "schema_version") == kSchemaVersionRecipe);
    auto v = h5::File::open_read(pv);
    CHECK_FALSE(v.is_group("/inputs/x"));
    CHECK(v.attr_int("/", "schema_version") == kSchemaVersion);
  }
  const auto rv = read_golden(pv);
  const auto rr = read_golden(pr);
  REQUIRE(rr.recipe_stale.empty());
  REQUIRE(rr.input_recipes.size() == 2);
  REQUIRE(*rr.input_recipes[0] == *gr.input_recipes[0]);  // every recipe field survives the file
  for (const char* n : {"x", "y"}) {
    INFO(n);
    CHECK(codes(rr, n) == codes(rv, n));
    CHECK(rr.input(n)->shape == rv.input(n)->shape);
    CHECK(rr.input(n)->axes == rv.input(n)->axes);
    CHECK(rr.input(n)->dtype == rv.input(n)->dtype);
  }
  CHECK(rr.input_hashes == rv.input_hashes);
  CHECK(manifest_line(rr) == manifest_line(rv));
  // The specials are there: 2 subnormals, 3 -0 and one bf16 max among x's regenerated values.
  int sub = 0, negzero = 0, max = 0;
  for (double x : rr.input("x")->data)
    sub += (x == info(DType::bf16).min_subnormal), negzero += (x == 0 && std::signbit(x)), max += (x == info(DType::bf16).max_finite);
  CHECK(sub == 2);
  CHECK(negzero >= 3);
  CHECK(max == 1);
  // Fresh, with and without the fixture check (which regenerates the inputs from the case).
  CHECK_FALSE(check_stale(rr, "").stale);
  const auto st = check_stale(rr, fx_recipe);
  INFO(st.reason);
  CHECK_FALSE(st.stale);
  // The case text (inputs = "recipe") and how x and y are stored differ, nothing else.
  const auto diff = golden_diff(rv, rr);
  REQUIRE(diff.size() == 3);
  CHECK(diff[0] == "case text differs");
  CHECK(diff[1] == "input 'x': stored as a recipe, the case stores it as values");
  CHECK(diff[2] == "input 'y': stored as a recipe, the case stores it as values");
  CHECK(fs::file_size(pr) < fs::file_size(pv));
}

TEST_CASE("an edited recipe parameter or hash makes the golden Stale with one line naming file and dataset", "[cpu][L0]") {
  const auto dir = test_dir("edit");
  const auto fx = write_fixture(dir, "inputs = \"recipe\"\n");
  const auto path = (dir / "g.h5").string();
  const Golden fresh = gen_golden(fx);
  write_golden(path, fresh);
  REQUIRE_FALSE(check_stale(read_golden(path), "").stale);
  auto edited = [&](const std::string& tag, auto&& edit) {
    const auto p = (dir / (tag + ".h5")).string();
    fs::copy_file(path, p, fs::copy_options::overwrite_existing);
    {
      auto f = h5::File::open_rw(p);
      edit(f);
      f.close();
    }
    return p;
  };
  const std::vector<std::pair<std::string, std::function<void(h5::File&)>>> edits{
      {"std", [](h5::File& f) { f.set_attr("/inputs/x", "dist_b", 3.5); }},
      {"scale", [](h5::File& f) { f.set_attr("/inputs/x", "dist_scale", 1.0); }},
      {"kind", [](h5::File& f) { f.set_attr("/inputs/y", "dist_kind", std::string("uniform")); }},
      {"seed", [](h5::File& f) { f.set_attr("/inputs/y", "seed", std::string("12")); }},
      {"stream", [](h5::File& f) { f.set_attr("/inputs/x", "stream", std::string("scaled_add/c/y")); }},
      {"specials", [](h5::File& f) { f.set_attr("/inputs/x", "specials", std::string("[{\"value\":\"subnormal\",\"count\":3}]")); }},
      {"hash", [](h5::File& f) { f.set_attr("/inputs/y", "fnv1a64", std::string("0123456789abcdef")); }},
  };
  for (const auto& [tag, edit] : edits) {
    INFO(tag);
    const auto p = edited(tag, edit);
    const auto g = read_golden(p);
    const auto st = check_stale(g, "");
    INFO(st.reason);
    CHECK(st.stale);
    CHECK_THAT(st.reason, assay_test::Contains(p));
    CHECK_THAT(st.reason, assay_test::Contains(tag == "kind" || tag == "seed" || tag == "hash" ? "/inputs/y" : "/inputs/x"));
    CHECK_THAT(st.reason, assay_test::Contains("regenerated from its recipe"));
    CHECK(st.reason.find('\n') == std::string::npos);
    // Read without the values (the runner's parent, compare): the streamed hash sees the same edit.
    const auto h = read_golden(p, false);
    CHECK(check_stale(h, "").reason == st.reason);
    // gen --check reads the stored golden unhashed and compares its recipes and recorded hashes
    // with the fresh golden's (golden_diff): the edit is a mismatch naming the input.
    const auto u = read_golden_recipes_unhashed(p);
    const auto diff = golden_diff(fresh, u);
    INFO(fmt::format("{}", fmt::join(diff, "; ")));
    REQUIRE(diff.size() == 1);
    CHECK_THAT(diff[0], assay_test::Contains(tag == "kind" || tag == "seed" || tag == "hash" ? "input 'y'" : "input 'x'"));
    CHECK_THAT(diff[0], assay_test::Contains(tag == "hash" ? "bits differ" : "the stored recipe differs"));
  }
  CHECK(golden_diff(fresh, read_golden_recipes_unhashed(path)).empty());
  // ... and keeps no values of a recipe input, the same hashes.
  const auto lean = read_golden(path, false);
  CHECK(lean.input("x")->data.empty());
  CHECK(lean.input_hashes == read_golden(path).input_hashes);
  CHECK_FALSE(check_stale(lean, "").stale);
  // An edit too small to change any bf16 code still changes the recipe, which content_fnv1a64 covers.
  const auto p = edited("ulp", [](h5::File& f) { f.set_attr("/inputs/x", "dist_b", 3.0000000000000004); });
  const auto g = read_golden(p);
  CHECK(g.recipe_stale.empty());  // the same codes
  const auto st = check_stale(g, "");
  CHECK(st.stale);
  CHECK_THAT(st.reason, assay_test::Contains("input attributes or the list of datasets hash to"));
}

TEST_CASE("a recipe that cannot be regenerated is an input error naming file and dataset, never a crash or a hang",
          "[cpu][L0]") {
  const auto dir = test_dir("bad");
  const auto fx = write_fixture(dir, "inputs = \"recipe\"\n");
  const auto path = (dir / "g.h5").string();
  write_golden(path, gen_golden(fx));
  auto err = [&](const std::string& tag, const std::function<void(h5::File&)>& edit, bool realize = true) {
    const auto p = (dir / (tag + ".h5")).string();
    fs::copy_file(path, p, fs::copy_options::overwrite_existing);
    {
      auto f = h5::File::open_rw(p);
      edit(f);
      f.close();
    }
    try {
      (void)read_golden(p, realize);
    } catch (const InputError& e) {
      const std::string w = e.what();
      CHECK(w.find('\n') == std::string::npos);
      CHECK_THAT(w, assay_test::Contains(p + ": /inputs/"));
      return w;
    }
    return std::string("no error");
  };
  CHECK_THAT(err("kind", [](h5::File& f) { f.set_attr("/inputs/x", "dist_kind", std::string("cauchy")); }),
             assay_test::Contains("unknown distribution 'cauchy'"));
  CHECK_THAT(err("count", [](h5::File& f) { f.set_attr("/inputs/x", "specials", std::string("[{\"value\":\"inf\",\"count\":100000}]")); }),
             assay_test::Contains("the counts add up to more than the 2640 elements"));
  CHECK_THAT(err("special", [](h5::File& f) { f.set_attr("/inputs/x", "specials", std::string("[{\"value\":\"pi\",\"count\":1}]")); }),
             assay_test::Contains("value must be one of"));
  CHECK_THAT(err("json", [](h5::File& f) { f.set_attr("/inputs/x", "specials", std::string("[{")); }),
             assay_test::Contains("attribute 'specials': malformed JSON"));
  CHECK_THAT(err("shape", [](h5::File& f) { f.set_attr_value("/inputs/x", "shape", std::vector<int64_t>{2, -33, 40}); }),
             assay_test::Contains("negative extent"));
  CHECK_THAT(err("huge", [](h5::File& f) { f.set_attr_value("/inputs/x", "shape", std::vector<int64_t>{1 << 30, 1 << 30, 40}); }),
             assay_test::Contains("/inputs/x"));
  // 2^40 elements: past the memory limit as values, and as bf16 codes too, so a reader that only
  // hashes it (read_golden(path, false)) refuses it at once instead of hashing for hours.
  for (const bool realize : {true, false})
    CHECK_THAT(err(realize ? "big" : "big_lean",
                   [](h5::File& f) { f.set_attr_value("/inputs/x", "shape", std::vector<int64_t>{1 << 20, 1 << 20}); }, realize),
               assay_test::Contains("above the memory limit"));
  CHECK_THAT(err("rng", [](h5::File& f) { f.set_attr("/inputs/x", "rng", std::string("mt19937")); }),
             assay_test::Contains("attribute 'rng'"));
  CHECK_THAT(err("intdtype", [](h5::File& f) { f.set_attr("/inputs/x", "dtype", std::string("i32")); }),
             assay_test::Contains("integer dtype int32 needs kind = \"int\""));
  CHECK_THAT(err("v2", [](h5::File& f) { f.set_attr("/", "schema_version", int64_t{2}); }),
             assay_test::Contains("needs schema_version 3"));
  CHECK_THAT(err("nan_param", [](h5::File& f) { f.set_attr("/inputs/x", "dist_a", std::nan("")); }),
             assay_test::Contains("is not a finite number"));
}

TEST_CASE("which inputs gen stores as recipes: the case field inputs, the size threshold, never explicit values",
          "[cpu][L0]") {
  gen::Generated g;
  gen::Recipe small{"op/c/a", 1, gen::Dist::normal(), DType::bf16, {4, 8}};
  gen::Recipe big{"op/c/b", 1, gen::Dist::normal(), DType::bf16, {1 << 12, 1 << 12}};  // 2^24 elements
  gen::Recipe scale{"op/c/s", 1, gen::Dist::integer(100, 120), DType::ue8m0, {1 << 12, 1 << 12}};
  g.recipes = {small, big, std::nullopt, scale};
  g.storage = gen::InputStorage::automatic;
  CHECK_FALSE(g.store_as_recipe(0));
  CHECK(g.store_as_recipe(1));
  CHECK_FALSE(g.store_as_recipe(2));  // add_values
  CHECK_FALSE(g.store_as_recipe(3));  // ue8m0: always values
  g.storage = gen::InputStorage::recipe;
  CHECK(g.store_as_recipe(0));
  CHECK(g.store_as_recipe(1));
  CHECK_FALSE(g.store_as_recipe(2));
  g.storage = gen::InputStorage::values;
  CHECK_FALSE(g.store_as_recipe(0));
  CHECK_FALSE(g.store_as_recipe(1));
}

TEST_CASE("realize_at, recipe_hash and recipe_codes: the same bits, hash and codes as the whole tensor, specials and l2norm rows included",
          "[cpu][L0]") {
  const gen::RecipeFail fail = [](std::string_view f, std::string_view m) {
    throw InputError(std::string(f) + ": " + std::string(m));
  };
  std::vector<gen::Recipe> rs;
  gen::Recipe a{"op/case/x", 9, gen::Dist::normal(0.5, 2), DType::bf16, {3, 70, 5}};
  a.dist.specials = {{"nan", 3}, {"max", 2}, {"-zero", 4}, {"inf", 2}, {"-inf", 1}};  // Inf: stored as Inf, not saturated
  rs.push_back(a);
  rs.push_back({"op/case/k", 10, gen::Dist::l2norm(), DType::f32, {4, 33, 16}});
  gen::Recipe u{"op/case/g", 11, gen::Dist::log_gate(-3, -0.1), DType::f16, {1 << 21}};
  u.dist.scale = 0.5;
  rs.push_back(u);
  rs.push_back({"op/case/i", 12, gen::Dist::integer(-5, 5), DType::i32, {1000}});
  rs.push_back({"op/case/s", 13, gen::Dist::l2norm(), DType::f32, {}});  // a scalar: no row to normalise
  for (const auto& r : rs) {
    INFO(r.stream);
    const auto whole = gen::realize(r, "t", fail);
    const Tensor t{"t", std::vector<std::string>(r.shape.size(), "X"), r.shape, r.dtype, whole};
    CHECK(gen::recipe_hash(r, "t", fail) == gen::input_hash(t));
    CHECK(gen::recipe_codes(r, "t", fail) == gen::storage_bytes(t));  // what the GPU worker uploads
    // Every element, then a strided selection of whole rows.
    std::vector<int64_t> all(whole.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    const auto v = gen::realize_at(r, "t", all, fail);
    int64_t differ = 0;
    for (size_t i = 0; i < v.size(); ++i) differ += std::memcmp(&v[i], &whole[i], sizeof(double)) != 0;
    CHECK(differ == 0);
    const int64_t row = r.shape.empty() ? 1 : r.shape.back();
    std::vector<int64_t> some;
    for (int64_t r0 = 0; r0 + row <= static_cast<int64_t>(whole.size()); r0 += 7 * row)
      for (int64_t j = 0; j < row; ++j) some.push_back(r0 + j);
    const auto w = gen::realize_at(r, "t", some, fail);
    differ = 0;
    for (size_t i = 0; i < w.size(); ++i) differ += std::memcmp(&w[i], &whole[static_cast<size_t>(some[i])], sizeof(double)) != 0;
    CHECK(differ == 0);
  }
  // An l2norm row is made whole or not at all; an offset past the end is refused.
  CHECK_THROWS(gen::realize_at(rs[1], "t", {0, 1, 2}, fail));
  CHECK_THROWS(gen::realize_at(rs[3], "t", {1000}, fail));
}
