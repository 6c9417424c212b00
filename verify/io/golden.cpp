#include "verify/io/golden.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fixtures/gen/inputs.h"
#include "fixtures/gen/philox.h"
#include "reference/core/check.h"
#include "verify/io/h5.h"
#include "verify/io/safe_files.h"

namespace assay {

const Output* Golden::output(std::string_view name) const {
  for (const auto& o : outputs)
    if (o.expected.name == name) return &o;
  return nullptr;
}
const Tensor* Golden::input(std::string_view name) const {
  for (const auto& t : inputs)
    if (t.name == name) return &t;
  return nullptr;
}
const Tensor* Golden::intermediate(std::string_view name) const {
  for (const auto& t : intermediates)
    if (t.name == name) return &t;
  return nullptr;
}
std::optional<Output> Golden::intermediate_output(std::string_view name) const {
  const Tensor* t = intermediate(name);
  if (!t) return std::nullopt;
  Output o;
  o.expected = *t;
  if (const auto b = intermediate_bounds.find(std::string(name)); b != intermediate_bounds.end()) o.bound = b->second;
  // Non-finite expected values (an empty split's -inf LSE) must then be matched exactly.
  o.allow_nonfinite = std::any_of(t->data.begin(), t->data.end(), [](double x) { return !std::isfinite(x); });
  return o;
}

bool input_is_recipe(const Golden& g, size_t i) { return i < g.input_recipes.size() && g.input_recipes[i].has_value(); }

int64_t written_schema_version(const Golden& g) {
  if (!g.sample.empty()) return std::max(g.prov.schema_version, kSchemaVersionSampled);
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (input_is_recipe(g, i)) return std::max(g.prov.schema_version, kSchemaVersionRecipe);
  return g.prov.schema_version;
}

std::string golden_rel_path(const std::string& op, const std::string& case_name) {
  return op + "/" + case_name + ".h5";
}

static h5::Elem code_elem(DType t) {
  switch (info(t).storage_bytes) {
    case 1: return t == DType::i8 ? h5::Elem::i8 : h5::Elem::u8;
    case 2: return h5::Elem::u16;
    case 4: return t == DType::i32 ? h5::Elem::i32 : h5::Elem::u32;
    default: return t == DType::i64 ? h5::Elem::i64 : h5::Elem::u64;
  }
}

static std::string join_axes(const std::vector<std::string>& a) {
  std::string s;
  for (size_t i = 0; i < a.size(); ++i) s += (i ? "," : "") + a[i];
  return s;
}
static std::vector<std::string> split_axes(const std::string& s) {
  std::vector<std::string> r;
  if (s.empty()) return r;
  size_t p = 0;
  while (true) {
    size_t q = s.find(',', p);
    r.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return r;
}

namespace {
// Length-prefixed pieces, so that ("ab","c") and ("a","bc") hash differently.
struct Hasher {
  uint64_t h = 0xcbf29ce484222325ull;
  Hasher& str(std::string_view s) {
    const uint64_t n = s.size();
    h = gen::fnv1a64(&n, sizeof n, h);
    h = gen::fnv1a64(s.data(), s.size(), h);
    return *this;
  }
  template <class T>
  Hasher& vec(const std::vector<T>& v) {  // little-endian host (as the HDF5 element types)
    const uint64_t n = v.size();
    h = gen::fnv1a64(&n, sizeof n, h);
    h = gen::fnv1a64(v.data(), v.size() * sizeof(T), h);
    return *this;
  }
  Hasher& f64(double x) { return vec(std::vector<double>{x}); }
  std::string hex() const { return fmt::format("{:016x}", h); }
};
}  // namespace

std::map<std::string, std::string> golden_hashes(const Golden& g) {
  std::map<std::string, std::string> m;
  for (const auto& o : g.outputs) {
    const auto& e = o.expected;
    auto head = [&](std::string_view group) {
      Hasher x;
      x.str(group).str(e.name).str(shape_str(e.shape));
      return x;
    };
    const auto sf = g.single_form.find(e.name);
    Hasher he = head("expected");
    he.str(name(e.dtype)).str(join_axes(e.axes)).str(o.allow_nonfinite ? "1" : "0");
    he.str(sf == g.single_form.end() ? "" : sf->second).vec(e.data);
    // Only a golden with a scale link hashes it, so every other golden keeps its hash.
    if (!o.scaled_by.empty()) he.str(o.scaled_by).str(std::to_string(o.scale_block));
    if (o.sampled) he.str("sampled").str(join_axes(o.full_axes)).str(shape_str(o.full_shape));
    m["/expected/" + e.name] = he.hex();
    if (o.rounded) m["/rounded/" + e.name] = head("rounded").str(name(e.dtype)).vec(*o.rounded).hex();
    if (o.bound) m["/bounds/" + e.name] = head("bounds").vec(*o.bound).hex();
    if (o.bound2) m["/bounds2/" + e.name] = head("bounds2").vec(*o.bound2).hex();
    if (o.allowed_mask) m["/allowed_mask/" + e.name] = head("allowed_mask").vec(*o.allowed_mask).hex();
    if (o.alt) m["/alt/" + e.name] = head("alt").vec(*o.alt).hex();
  }
  for (const auto& t : g.intermediates) {
    // The dtype enters the hash only when it is not the fp64 default (older goldens stay fresh).
    Hasher h;
    h.str("intermediates").str(t.name).str(shape_str(t.shape)).str(join_axes(t.axes));
    if (t.dtype != DType::f64) h.str(name(t.dtype));
    m["/intermediates/" + t.name] = h.vec(t.data).hex();
  }
  for (const auto& [n, b] : g.intermediate_bounds)
    m["/intermediate_bounds/" + n] = Hasher().str("intermediate_bounds").str(n).vec(b).hex();
  return m;
}

std::string content_hash(const Golden& g) {
  const auto& p = g.prov;
  Hasher x;
  x.str(std::to_string(written_schema_version(g))).str(p.op).str(p.case_name).str(p.level).str(p.case_toml).str(std::to_string(p.seed)).str(p.rng);
  for (const auto& a : g.agreement) x.str(a.tensor).str(a.form_a).str(a.form_b).f64(a.max_rel);
  for (const auto& [k, v] : g.case_fields.all()) {
    x.str(k).str(std::to_string(v.index()));
    std::visit(
        [&](const auto& y) {
          using T = std::decay_t<decltype(y)>;
          if constexpr (std::is_same_v<T, std::string>) x.str(y);
          else if constexpr (std::is_same_v<T, bool>) x.str(y ? "1" : "0");
          else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) x.vec(std::vector<T>{y});
          else x.vec(y);
        },
        v);
  }
  std::vector<size_t> order(g.inputs.size());  // by name: a reader lists them sorted
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return g.inputs[a].name < g.inputs[b].name; });
  for (const size_t i : order) {
    const auto& t = g.inputs[i];
    x.str(t.name).str(name(t.dtype)).str(join_axes(t.axes)).str(shape_str(t.shape)).str(i < g.input_hashes.size() ? g.input_hashes[i] : "");
    // An input stored as its recipe: the recipe too, so that an edit that happens to regenerate the
    // same codes is still an edit (values goldens hash as before).
    if (input_is_recipe(g, i)) {
      const auto& r = *g.input_recipes[i];
      x.str("recipe").str(r.stream).str(std::to_string(r.seed)).str(r.dist.kind).f64(r.dist.a).f64(r.dist.b).f64(r.dist.scale);
      for (const auto& sp : r.dist.specials) x.str(sp.value).str(std::to_string(sp.count));
    }
  }
  if (!g.sample.empty()) {
    const auto& sp = g.sample;
    x.str("sample").vec(sp.seqs).vec(sp.heads).vec(sp.tokens).str(sp.batch_axis).str(sp.token_axis).str(join_axes(sp.head_axes));
    x.str(std::to_string(sp.head_count)).str(std::to_string(sp.token_count));
  }
  for (const auto& [path, h] : golden_hashes(g)) x.str(path).str(h);
  return x.hex();
}

static void write_codes(h5::File& f, const std::string& ds, DType t, const Shape& shape, const std::vector<uint64_t>& codes) {
  const auto e = code_elem(t);
  const int w = info(t).storage_bytes;
  std::vector<uint8_t> buf(codes.size() * static_cast<size_t>(w));
  for (size_t i = 0; i < codes.size(); ++i)
    std::memcpy(buf.data() + i * static_cast<size_t>(w), &codes[i], static_cast<size_t>(w));  // little-endian host
  f.write(ds, e, shape, buf.data());
}

// An output scaled per block by another (Output::scaled_by) names an output of its rows with one
// scale per block along the last axis. Checked before a golden is written and when one is read,
// so gen never writes a file its reader refuses.
static void check_scale_links(const std::string& path, const Golden& g) {
  for (const auto& o : g.outputs) {
    if (o.scaled_by.empty()) continue;
    const Output* sc = g.output(o.scaled_by);
    const auto& e = o.expected;
    const bool fits = sc && sc != &o && o.scale_block > 0 && sc->expected.shape.size() == e.shape.size() && !e.shape.empty() &&
                      std::equal(e.shape.begin(), e.shape.end() - 1, sc->expected.shape.begin()) &&
                      sc->expected.shape.back() == (e.shape.back() + o.scale_block - 1) / o.scale_block;
    if (!fits)
      throw InputError(fmt::format("{}: /expected/{}: attribute 'scaled_by' = '{}' does not name another output of shape {} "
                                   "with blocks of {} along the last axis",
                                   path, e.name, printable(o.scaled_by), shape_str(e.shape), o.scale_block));
  }
}

// An input stored as its recipe: a group /inputs/<name> whose attributes regenerate it
// (golden/SCHEMA.md "Inputs by recipe"); no values.
static void write_recipe(h5::File& f, const std::string& grp, const Tensor& t, const gen::Recipe& r, const std::string& hash) {
  ASSAY_CHECK(r.dtype == t.dtype && r.shape == t.shape, "input {}: its recipe is of another dtype or shape", t.name);
  ASSAY_CHECK(r.dtype != DType::ue8m0, "input {}: ue8m0 inputs are stored as values", t.name);
  f.create_group(grp);
  f.set_attr(grp, "storage", std::string("recipe"));
  f.set_attr(grp, "dtype", std::string(name(t.dtype)));
  f.set_attr(grp, "axes", join_axes(t.axes));
  f.set_attr_value(grp, "shape", std::vector<int64_t>(t.shape.begin(), t.shape.end()));
  f.set_attr(grp, "rng", std::string(kRngName));
  f.set_attr(grp, "stream", r.stream);
  f.set_attr(grp, "seed", fmt::format("{}", r.seed));
  f.set_attr(grp, "dist_kind", r.dist.kind);
  f.set_attr(grp, "dist_a", r.dist.a);
  f.set_attr(grp, "dist_b", r.dist.b);
  f.set_attr(grp, "dist_scale", r.dist.scale);
  nlohmann::json sp = nlohmann::json::array();
  for (const auto& x : r.dist.specials) sp.push_back({{"value", x.value}, {"count", x.count}});
  f.set_attr(grp, "specials", sp.dump());
  f.set_attr(grp, "fnv1a64", hash);
}

void write_golden(const std::string& path, const Golden& g) {
  namespace fs = std::filesystem;
  std::lock_guard<std::recursive_mutex> lk(h5::library_mutex());
  check_output_path(path, "golden");  // never renamed over a device, FIFO, link or an input
  fs::create_directories(fs::path(path).parent_path());
  check_scale_links(path, g);
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  try {
    auto f = h5::File::create(tmp);
    const auto& p = g.prov;
    f.set_attr("/", "schema_version", written_schema_version(g));
    f.set_attr("/", "op", p.op);
    f.set_attr("/", "case", p.case_name);
    f.set_attr("/", "level", p.level);
    f.set_attr("/", "case_toml", p.case_toml);
    f.set_attr("/", "seed", fmt::format("{}", p.seed));
    f.set_attr("/", "rng", p.rng);
    f.set_attr("/", "generator", p.generator);
    f.set_attr("/", "git_rev", p.git_rev);
    f.set_attr("/", "compiler", p.compiler);
    nlohmann::json agr = nlohmann::json::array();
    for (const auto& a : g.agreement)
      agr.push_back({{"tensor", a.tensor}, {"form_a", a.form_a}, {"form_b", a.form_b}, {"max_rel", a.max_rel}});
    f.set_attr("/", "oracle_agreement", agr.dump());

    for (const char* grp : {"/case", "/inputs", "/expected", "/rounded", "/bounds", "/allowed_mask", "/alt", "/intermediates"})
      f.create_group(grp);
    if (!g.intermediate_bounds.empty()) f.create_group("/intermediate_bounds");
    if (std::any_of(g.outputs.begin(), g.outputs.end(), [](const Output& o) { return o.bound2.has_value(); }))
      f.create_group("/bounds2");
    for (const auto& [k, v] : g.case_fields.all()) f.set_attr_value("/case", k, v);
    ASSAY_CHECK(g.input_recipes.empty() || g.input_recipes.size() == g.inputs.size(), "{} recipes for {} inputs",
                g.input_recipes.size(), g.inputs.size());
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const auto& t = g.inputs[i];
      if (input_is_recipe(g, i)) {
        write_recipe(f, "/inputs/" + t.name, t, *g.input_recipes[i], g.input_hashes.at(i));
        continue;
      }
      std::vector<uint64_t> codes(t.data.size());
      for (size_t k = 0; k < codes.size(); ++k) codes[k] = encode(t.dtype, t.data[k]);
      const std::string ds = "/inputs/" + t.name;
      write_codes(f, ds, t.dtype, t.shape, codes);
      f.set_attr(ds, "dtype", std::string(name(t.dtype)));
      f.set_attr(ds, "axes", join_axes(t.axes));
      f.set_attr(ds, "fnv1a64", g.input_hashes.at(i));
    }
    if (!g.sample.empty()) {
      const auto& sp = g.sample;
      ASSAY_CHECK(g.intermediates.empty(), "a sampled golden holds no intermediates");
      f.create_group("/sample");
      for (const auto& [n, v] : {std::pair{"seqs", &sp.seqs}, std::pair{"heads", &sp.heads}, std::pair{"tokens", &sp.tokens}})
        f.write(std::string("/sample/") + n, h5::Elem::i64, {static_cast<int64_t>(v->size())}, v->data());
      f.set_attr("/sample", "batch_axis", sp.batch_axis);
      f.set_attr("/sample", "token_axis", sp.token_axis);
      f.set_attr("/sample", "head_axes", join_axes(sp.head_axes));
      f.set_attr("/sample", "head_count", sp.head_count);
      f.set_attr("/sample", "token_count", sp.token_count);
    }
    for (const auto& o : g.outputs) {
      const auto& e = o.expected;
      const std::string ds = "/expected/" + e.name;
      ASSAY_CHECK(o.sampled == !g.sample.empty(), "output {}: sampled {} in a golden {}sampled", e.name, o.sampled,
                  g.sample.empty() ? "not " : "");
      f.write(ds, h5::Elem::f64, e.shape, e.data.data());
      if (o.sampled) {
        f.set_attr(ds, "full_axes", join_axes(o.full_axes));
        f.set_attr_value(ds, "full_shape", CaseFields::Value{o.full_shape});
      }
      f.set_attr(ds, "dtype", std::string(name(e.dtype)));
      f.set_attr(ds, "axes", join_axes(e.axes));
      f.set_attr(ds, "allow_nonfinite", static_cast<int64_t>(o.allow_nonfinite));
      if (const auto sf = g.single_form.find(e.name); sf != g.single_form.end()) f.set_attr(ds, "single_form_reason", sf->second);
      if (!o.scaled_by.empty()) {
        f.set_attr(ds, "scaled_by", o.scaled_by);
        f.set_attr(ds, "scale_block", o.scale_block);
      }
      if (o.rounded) {
        write_codes(f, "/rounded/" + e.name, e.dtype, e.shape, *o.rounded);
        f.set_attr("/rounded/" + e.name, "dtype", std::string(name(e.dtype)));
      }
      // Bounds are float32 (gen rounded them up): each value must be exact in float32.
      for (const auto& [grp, b] : {std::pair{"/bounds/", &o.bound}, std::pair{"/bounds2/", &o.bound2}}) {
        if (!*b) continue;
        std::vector<float> b32((*b)->size());
        for (size_t k = 0; k < b32.size(); ++k) {
          b32[k] = static_cast<float>((**b)[k]);
          ASSAY_CHECK(static_cast<double>(b32[k]) == (**b)[k], "{}{} is not float32-representable", grp, e.name);
        }
        f.write(grp + e.name, h5::Elem::f32, e.shape, b32.data());
      }
      if (o.allowed_mask) f.write("/allowed_mask/" + e.name, h5::Elem::u64, e.shape, o.allowed_mask->data());
      if (o.alt) f.write("/alt/" + e.name, h5::Elem::f64, e.shape, o.alt->data());
    }
    for (const auto& t : g.intermediates) {
      const std::string ds = "/intermediates/" + t.name;
      f.write(ds, h5::Elem::f64, t.shape, t.data.data());
      f.set_attr(ds, "axes", join_axes(t.axes));
      if (t.dtype != DType::f64) f.set_attr(ds, "dtype", std::string(name(t.dtype)));
      if (const auto b = g.intermediate_bounds.find(t.name); b != g.intermediate_bounds.end()) {
        std::vector<uint64_t> codes(b->second.size());
        for (size_t k = 0; k < codes.size(); ++k) {
          codes[k] = encode(DType::bf16, b->second[k]);
          ASSAY_CHECK(decode(DType::bf16, codes[k]) == b->second[k], "intermediate bound {} is not bf16-representable", t.name);
        }
        write_codes(f, "/intermediate_bounds/" + t.name, DType::bf16, t.shape, codes);
        f.set_attr("/intermediate_bounds/" + t.name, "dtype", std::string("bf16"));
      }
    }
    for (const auto& [n, b] : g.intermediate_bounds)
      ASSAY_CHECK(g.intermediate(n) != nullptr, "a bound for '{}', which is no intermediate", n);
    for (const auto& [ds, h] : golden_hashes(g)) f.set_attr(ds, "fnv1a64", h);
    f.set_attr("/", "content_fnv1a64", content_hash(g));
    f.close();
    fs::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

static DType dtype_attr(const h5::File& f, const std::string& ds) {
  const auto s = f.attr_str(ds, "dtype");
  auto d = parse_dtype(s);
  if (!d) throw InputError(fmt::format("{}: {}: unknown dtype '{}'", f.path(), ds, s));
  return *d;
}

static std::vector<double> decode_codes(const h5::File& f, const std::string& ds, DType t) {
  const auto inf = f.info(ds);
  if (!inf.is_integer || static_cast<int>(inf.elem_size) != info(t).storage_bytes)
    throw InputError(fmt::format("{}: {}: storage of dtype {} must be {}-byte integers", f.path(), ds, name(t),
                                 info(t).storage_bytes));
  auto codes = f.read_u64(ds);
  std::vector<double> v(codes.size());
  const int bits = info(t).bits;
  for (size_t i = 0; i < codes.size(); ++i) {
    uint64_t c = codes[i];
    if (bits < 64 && info(t).is_float && (c >> bits) != 0)
      throw InputError(fmt::format("{}: {}: element {} holds code {:#x}, not a {} code", f.path(), ds, i, c, name(t)));
    v[i] = decode(t, c);
  }
  return v;
}

// The /sample group of a sampled golden (schema version 4), or an empty spec.
static SampleSpec read_sample(const h5::File& f, int64_t version) {
  SampleSpec sp;
  if (!f.exists("/sample")) return sp;
  const std::string path = f.path();
  if (version < kSchemaVersionSampled)
    throw InputError(fmt::format("{}: /sample: sampled outputs need schema_version {} (the file says {})", path,
                                 kSchemaVersionSampled, version));
  auto ints = [&](const char* n) {
    const std::string ds = std::string("/sample/") + n;
    const auto inf = f.info(ds);
    if (!inf.is_integer || inf.shape.size() != 1 || inf.shape[0] > (int64_t{1} << 24))
      throw InputError(fmt::format("{}: {}: expected a 1-D integer dataset of at most 2^24 entries", path, ds));
    std::vector<int64_t> v;
    for (const uint64_t x : f.read_u64(ds)) {
      if (x > (uint64_t{1} << 62)) throw InputError(fmt::format("{}: {}: entry {} out of range", path, ds, x));
      v.push_back(static_cast<int64_t>(x));
    }
    return v;
  };
  sp.seqs = ints("seqs");
  sp.heads = ints("heads");
  sp.tokens = ints("tokens");
  sp.batch_axis = f.attr_str("/sample", "batch_axis");
  sp.token_axis = f.attr_str("/sample", "token_axis");
  sp.head_axes = split_axes(f.attr_str("/sample", "head_axes"));
  sp.head_count = f.attr_int("/sample", "head_count");
  sp.token_count = f.attr_int("/sample", "token_count");
  if (sp.seqs.empty() || sp.seqs.size() != sp.heads.size())
    throw InputError(fmt::format("{}: /sample: seqs and heads must pair up ({} and {} entries)", path, sp.seqs.size(), sp.heads.size()));
  if (sp.head_count < 1 || sp.token_count < 1)
    throw InputError(fmt::format("{}: /sample: head_count {} and token_count {} must be >= 1", path, sp.head_count, sp.token_count));
  for (size_t k = 0; k < sp.tokens.size(); ++k)
    if (sp.tokens[k] >= sp.token_count || (k > 0 && sp.tokens[k] <= sp.tokens[k - 1]))
      throw InputError(fmt::format("{}: /sample/tokens: entry {} = {}: tokens must ascend within [0, {})", path, k, sp.tokens[k],
                                   sp.token_count));
  for (const int64_t h : sp.heads)
    if (h >= sp.head_count) throw InputError(fmt::format("{}: /sample/heads: {} is not below head_count {}", path, h, sp.head_count));
  return sp;
}

// A sampled output's whole-tensor axes and shape, and the offsets of its stored elements.
static void read_sampled(const h5::File& f, const std::string& ds, const Golden& g, Output& o) {
  const std::string path = f.path();
  const bool has = f.has_attr(ds, "full_shape");
  if (has != !g.sample.empty())
    throw InputError(fmt::format("{}: {}: {}", path, ds, has ? "attribute 'full_shape' in a golden without /sample"
                                                              : "a golden with /sample needs attribute 'full_shape' on every output"));
  if (!has) return;
  o.sampled = true;
  o.full_axes = split_axes(f.attr_str(ds, "full_axes"));
  const auto v = f.attr_value(ds, "full_shape");
  if (!std::holds_alternative<std::vector<int64_t>>(v))
    throw InputError(fmt::format("{}: {}: attribute 'full_shape' must be a 1-D int64 array", path, ds));
  o.full_shape = std::get<std::vector<int64_t>>(v);
  if (o.full_axes.size() != o.full_shape.size() || o.expected.shape.size() != 1)
    throw InputError(fmt::format("{}: {}: a sampled output is 1-D with as many full_axes as full_shape entries", path, ds));
  // The count first, so that a hostile sample cannot make the offsets list huge.
  int64_t per = 1;
  for (size_t k = 0; k < o.full_axes.size(); ++k) {
    const auto& ax = o.full_axes[k];
    const bool head = std::find(g.sample.head_axes.begin(), g.sample.head_axes.end(), ax) != g.sample.head_axes.end();
    int64_t n = o.full_shape[k];
    if (ax == g.sample.batch_axis || head) n = 1;
    else if (ax == g.sample.token_axis && static_cast<int64_t>(g.sample.tokens.size()) != g.sample.token_count)
      n = static_cast<int64_t>(g.sample.tokens.size());
    if (n < 0 || __builtin_mul_overflow(per, n, &per))
      throw InputError(fmt::format("{}: {}: attribute 'full_shape' {} overflows", path, ds, shape_str(o.full_shape)));
  }
  if (int64_t total = 0; __builtin_mul_overflow(per, static_cast<int64_t>(g.sample.slices()), &total) || total != o.expected.size())
    throw InputError(fmt::format("{}: {}: {} values for the {} x {} elements the sample names", path, ds, o.expected.size(),
                                 g.sample.slices(), per));
  try {
    check_memory(numel(o.full_shape), 0, "the whole tensor");  // numel's overflow check
    o.sample_offsets = sample_offsets(g.sample, o.full_axes, o.full_shape);
  } catch (const std::exception& e) {
    throw InputError(fmt::format("{}: {}: the sample does not fit the output {}: {}", path, ds, shape_str(o.full_shape), e.what()));
  }
  if (static_cast<int64_t>(o.sample_offsets.size()) != o.expected.size())
    throw InputError(fmt::format("{}: {}: {} values for the {} elements the sample names", path, ds, o.expected.size(),
                                 o.sample_offsets.size()));
}

// regenerate = false: inputs stored as recipes are validated but not regenerated (their data stays
// empty): what the crash probe's child reads, since regeneration is our code, not HDF5's.
// How recipe inputs are read: checked only (the crash probe's child: regeneration is our code, not
// HDF5's), hashed a block at a time without keeping values (gen::recipe_hash: what a reader that
// needs no input values does), or regenerated whole.
enum class Regen { check, hash, values };
static Golden read_golden_here(const std::string& path, Regen regen = Regen::values);

// The logical shape of an input stored as its recipe (attribute `shape`, 1-D int64).
static Shape recipe_shape(const h5::File& f, const std::string& grp) {
  const auto v = f.attr_value(grp, "shape");
  if (const auto* s = std::get_if<std::vector<int64_t>>(&v)) {
    for (const int64_t e : *s)
      if (e < 0) throw InputError(fmt::format("{}: {}: attribute 'shape': negative extent {}", f.path(), grp, e));
    return Shape(s->begin(), s->end());
  }
  throw InputError(fmt::format("{}: {}: attribute 'shape': expected a 1-D int64 array", f.path(), grp));
}

static gen::Recipe read_recipe(const h5::File& f, const std::string& grp, DType dtype, const Shape& shape) {
  auto bad = [&](std::string_view attr, std::string_view why) {
    return InputError(fmt::format("{}: {}: attribute '{}': {}", f.path(), grp, attr, why));
  };
  if (f.attr_str(grp, "storage") != "recipe") throw bad("storage", "expected \"recipe\" (a group under /inputs is a recipe)");
  if (const auto rng = f.attr_str(grp, "rng"); rng != kRngName)
    throw bad("rng", fmt::format("'{}' is not this assay's generator '{}'", printable(rng), kRngName));
  if (dtype == DType::ue8m0) throw bad("dtype", "ue8m0 inputs are stored as values, never as recipes");
  gen::Recipe r;
  r.dtype = dtype;
  r.shape = shape;
  r.stream = f.attr_str(grp, "stream");
  {
    const auto s = f.attr_str(grp, "seed");
    const auto res = std::from_chars(s.data(), s.data() + s.size(), r.seed);
    if (s.empty() || res.ec != std::errc() || res.ptr != s.data() + s.size()) throw bad("seed", "not a decimal uint64");
  }
  r.dist.kind = f.attr_str(grp, "dist_kind");
  r.dist.a = f.attr_f64(grp, "dist_a");
  r.dist.b = f.attr_f64(grp, "dist_b");
  r.dist.scale = f.attr_f64(grp, "dist_scale");
  try {
    const auto sp = nlohmann::json::parse(f.attr_str(grp, "specials"));
    if (!sp.is_array()) throw bad("specials", "expected a JSON array of {value, count}");
    for (const auto& e : sp) {
      if (!e.is_object() || !e.contains("value") || !e.contains("count") || !e.at("value").is_string() ||
          !e.at("count").is_number_integer())
        throw bad("specials", "expected a JSON array of {\"value\": string, \"count\": integer}");
      r.dist.specials.push_back({e.at("value").get<std::string>(), e.at("count").get<int64_t>()});
    }
  } catch (const nlohmann::json::exception&) {
    throw bad("specials", "malformed JSON");
  }
  return r;
}

// Probed in a child first (an HDF5 crash there is an input error, not ours), then read here.
static Golden read_golden_probed(const std::string& path, Regen regen) {
  std::lock_guard<std::recursive_mutex> lk(h5::library_mutex());
  h5::probe_in_child(path, [&] { (void)read_golden_here(path, Regen::check); });
  return read_golden_here(path, regen);
}

Golden read_golden(const std::string& path, bool realize_recipes) {
  return read_golden_probed(path, realize_recipes ? Regen::values : Regen::hash);
}

Golden read_golden_recipes_unhashed(const std::string& path) { return read_golden_probed(path, Regen::check); }

static Golden read_golden_here(const std::string& path, Regen regen) {
  auto f = h5::File::open_read(path);
  Golden g;
  auto& p = g.prov;
  p.schema_version = f.attr_int("/", "schema_version");
  if (p.schema_version != kSchemaVersion && p.schema_version != kSchemaVersionRecipe && p.schema_version != kSchemaVersionSampled)
    throw InputError(fmt::format("{}: attribute 'schema_version': {} (this assay reads {} to {}; regenerate with assay gen){}",
                                 path, p.schema_version, kSchemaVersion, kSchemaVersionSampled,
                                 p.schema_version == 1 ? ": version 1 goldens carry no content hashes" : ""));
  p.op = f.attr_str("/", "op");
  p.case_name = f.attr_str("/", "case");
  p.level = f.attr_str("/", "level");
  p.case_toml = f.attr_str("/", "case_toml");
  {
    const auto s = f.attr_str("/", "seed");
    const auto r = std::from_chars(s.data(), s.data() + s.size(), p.seed);
    if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
      throw InputError(fmt::format("{}: attribute 'seed': '{}' is not a decimal uint64", path, s));
  }
  p.rng = f.attr_str("/", "rng");
  p.generator = f.attr_str("/", "generator");
  p.git_rev = f.attr_str("/", "git_rev");
  p.compiler = f.attr_str("/", "compiler");
  try {
    for (const auto& a : nlohmann::json::parse(f.attr_str("/", "oracle_agreement")))
      g.agreement.push_back({a.at("tensor"), a.at("form_a"), a.at("form_b"), a.at("max_rel")});
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: attribute 'oracle_agreement': malformed JSON", path));
  }
  if (!f.exists("/case"))
    throw InputError(fmt::format("{}: /case: missing group (the resolved case fields; regenerate with assay gen)", path));
  for (const auto& k : f.attr_names("/case")) g.case_fields.set(k, f.attr_value("/case", k));
  {
    // The whole file's declared size, before anything is loaded: many datasets each under the
    // limit must not add up past it (a small file can declare huge chunked datasets).
    // Bytes held: a stored dataset 16 an element (its codes and its values); a recipe input 8 when
    // regenerated whole, else its storage codes' width (made and hashed a block at a time, but the
    // time that takes is bounded by what the codes would occupy).
    int64_t total = 0, largest = -1;
    std::string largest_ds;
    for (const char* grp : {"/inputs", "/expected", "/rounded", "/bounds", "/bounds2", "/allowed_mask", "/alt", "/intermediates",
                            "/intermediate_bounds"}) {
      if (!f.exists(grp)) continue;
      for (const auto& n : f.list(grp)) {
        const std::string ds = std::string(grp) + "/" + n;
        // A recipe's shape attribute (its errors already name the file and dataset).
        const bool recipe = std::string_view(grp) == "/inputs" && f.is_group(ds);
        const Shape rshape = recipe ? recipe_shape(f, ds) : Shape{};
        try {
          const Shape shape = recipe ? rshape : f.info(ds).shape;
          int64_t each = 16;
          if (recipe && regen != Regen::values) {
            const auto d = f.has_attr(ds, "dtype") ? parse_dtype(f.attr_str(ds, "dtype")) : std::nullopt;
            each = d ? info(*d).storage_bytes : 8;
          } else if (recipe) {
            each = 8;
          }
          int64_t bytes = 0;
          if (__builtin_mul_overflow(numel(shape), each, &bytes) || __builtin_add_overflow(total, bytes, &total))
            throw InputError("element count overflows");
          if (bytes > largest) largest = bytes, largest_ds = fmt::format("{} {}", ds, shape_str(shape));
        } catch (const InputError& e) {
          throw InputError(fmt::format("{}: {}: {}", path, ds, e.what()));
        }
      }
    }
    if (total > memory_limit())
      throw InputError(fmt::format("{}: {}: the golden's datasets together need {:.3g} GB to read ({:.3g} GB this one, the "
                                   "largest), above the memory limit of {:.3g} GB (--max-memory)",
                                   path, largest_ds, static_cast<double>(total) / 1e9, static_cast<double>(largest) / 1e9,
                                   static_cast<double>(memory_limit()) / 1e9));
  }
  for (const auto& n : f.list("/inputs")) {
    const std::string ds = "/inputs/" + n;
    Tensor t;
    t.name = n;
    t.dtype = dtype_attr(f, ds);
    const bool recipe = f.is_group(ds);
    if (recipe && p.schema_version < kSchemaVersionRecipe)
      throw InputError(fmt::format("{}: {}: an input stored as a recipe needs schema_version {} (the file says {})", path, ds,
                                   kSchemaVersionRecipe, p.schema_version));
    t.shape = recipe ? recipe_shape(f, ds) : f.info(ds).shape;
    t.axes = split_axes(f.attr_str(ds, "axes"));
    if (t.axes.size() != t.shape.size())
      throw InputError(fmt::format("{}: {}: {} axes for a rank-{} dataset", path, ds, t.axes.size(), t.shape.size()));
    g.input_hashes.push_back(f.attr_str(ds, "fnv1a64"));
    if (recipe) {
      auto r = read_recipe(f, ds, t.dtype, t.shape);
      const gen::RecipeFail fail = [&](std::string_view field, std::string_view msg) -> void {
        throw InputError(fmt::format("{}: {}: recipe cannot be regenerated: {}: {}", path, ds, field, msg));
      };
      if (regen == Regen::check) {
        gen::check_dist(r.dist, "dist." + n, fail);  // cheap checks only
        g.input_recipes.resize(g.inputs.size());
        g.input_recipes.push_back(std::move(r));
        g.inputs.push_back(std::move(t));
        continue;
      }
      std::string h;
      if (regen == Regen::values) {
        t.data = gen::realize(r, n, fail);
        h = gen::input_hash(t);
      } else {
        h = gen::recipe_hash(r, n, fail);  // t.data stays empty
      }
      if (h != g.input_hashes.back() && g.recipe_stale.empty())
        g.recipe_stale = fmt::format("{}: {}: regenerated from its recipe, the codes hash to {} but the golden recorded {} "
                                     "(a recipe attribute or the hash edited, or this assay generates differently)",
                                     path, ds, h, g.input_hashes.back());
      g.input_recipes.resize(g.inputs.size());
      g.input_recipes.push_back(std::move(r));
    } else {
      t.data = decode_codes(f, ds, t.dtype);
      if (!g.input_recipes.empty()) g.input_recipes.push_back(std::nullopt);
    }
    g.inputs.push_back(std::move(t));
  }
  g.sample = read_sample(f, p.schema_version);
  for (const auto& n : f.list("/expected")) {
    const std::string ds = "/expected/" + n;
    Output o;
    auto& e = o.expected;
    e.name = n;
    e.dtype = dtype_attr(f, ds);
    const auto inf = f.info(ds);
    if (!inf.is_float || inf.elem_size != 8) throw InputError(fmt::format("{}: {}: expected outputs must be float64", path, ds));
    e.shape = inf.shape;
    e.axes = split_axes(f.attr_str(ds, "axes"));
    if (e.axes.size() != e.shape.size())
      throw InputError(fmt::format("{}: {}: {} axes for a rank-{} dataset", path, ds, e.axes.size(), e.shape.size()));
    e.data = f.read_f64(ds);
    read_sampled(f, ds, g, o);
    o.allow_nonfinite = f.has_attr(ds, "allow_nonfinite") && f.attr_int(ds, "allow_nonfinite") != 0;
    if (f.has_attr(ds, "single_form_reason")) g.single_form[n] = f.attr_str(ds, "single_form_reason");
    if (f.has_attr(ds, "scaled_by")) {
      o.scaled_by = f.attr_str(ds, "scaled_by");
      o.scale_block = f.has_attr(ds, "scale_block") ? f.attr_int(ds, "scale_block") : 0;
      if (o.scale_block < 1 || o.scale_block > (int64_t{1} << 20))
        throw InputError(fmt::format("{}: {}: attribute 'scale_block': {} (expected 1 .. 2^20)", path, ds, o.scale_block));
    }
    if (f.exists("/rounded/" + n)) {
      const std::string rd = "/rounded/" + n;
      if (f.info(rd).shape != e.shape) throw InputError(fmt::format("{}: {}: shape differs from {}", path, rd, ds));
      o.rounded = f.read_u64(rd);
    }
    for (const auto& [grp, b] : {std::pair{"/bounds/", &o.bound}, std::pair{"/bounds2/", &o.bound2}}) {
      const std::string bd = grp + n;
      if (!f.exists(bd)) continue;
      const auto binf = f.info(bd);
      if (binf.shape != e.shape) throw InputError(fmt::format("{}: {}: shape differs from {}", path, bd, ds));
      if (!binf.is_float) throw InputError(fmt::format("{}: {}: bounds must be float32 (or float64)", path, bd));
      *b = f.read_f64(bd);
    }
    for (const char* grp : {"/allowed_mask/", "/alt/"}) {
      const std::string ad = grp + n;
      if (!f.exists(ad)) continue;
      if (f.info(ad).shape != e.shape) throw InputError(fmt::format("{}: {}: shape differs from {}", path, ad, ds));
      if (std::string_view(grp) == "/allowed_mask/") o.allowed_mask = f.read_u64(ad);
      else o.alt = f.read_f64(ad);
    }
    g.outputs.push_back(std::move(o));
  }
  if (g.outputs.empty()) throw InputError(fmt::format("{}: /expected: no expected outputs", path));
  check_scale_links(path, g);
  for (const auto& n : f.list("/intermediates")) {
    const std::string ds = "/intermediates/" + n;
    Tensor t;
    t.name = n;
    t.shape = f.info(ds).shape;
    t.axes = split_axes(f.attr_str(ds, "axes"));
    if (t.axes.size() != t.shape.size())
      throw InputError(fmt::format("{}: {}: {} axes for a rank-{} dataset", path, ds, t.axes.size(), t.shape.size()));
    t.dtype = f.has_attr(ds, "dtype") ? dtype_attr(f, ds) : DType::f64;
    t.data = f.read_f64(ds);
    const std::string bd = "/intermediate_bounds/" + n;
    if (f.exists(bd)) {
      if (f.info(bd).shape != t.shape) throw InputError(fmt::format("{}: {}: shape differs from {}", path, bd, ds));
      g.intermediate_bounds[n] = decode_codes(f, bd, dtype_attr(f, bd));
    }
    g.intermediates.push_back(std::move(t));
  }
  if (!g.sample.empty() && !g.intermediates.empty())
    throw InputError(fmt::format("{}: /intermediates: a sampled golden holds no intermediates", path));
  if (f.exists("/intermediate_bounds"))
    for (const auto& n : f.list("/intermediate_bounds"))
      if (!g.intermediate_bounds.count(n))
        throw InputError(fmt::format("{}: /intermediate_bounds/{}: no intermediate of that name", path, n));
  for (const auto& [ds, h] : golden_hashes(g))
    if (f.has_attr(ds, "fnv1a64")) g.recorded_hashes[ds] = f.attr_str(ds, "fnv1a64");
  if (f.has_attr("/", "content_fnv1a64")) g.recorded_content_hash = f.attr_str("/", "content_fnv1a64");
  return g;
}

}  // namespace assay

namespace assay {

std::vector<std::string> golden_diff(const Golden& fresh, const Golden& stored, double rel) {
  std::vector<std::string> d;
  if (fresh.prov.case_toml != stored.prov.case_toml) d.push_back("case text differs");
  if (fresh.single_form != stored.single_form) d.push_back("single_form reasons differ");
  if (!(fresh.sample == stored.sample))
    d.push_back(fmt::format("sampled slices differ: have {}, want {}", stored.sample.empty() ? "none" : sample_summary(stored.sample),
                            fresh.sample.empty() ? "none" : sample_summary(fresh.sample)));
  if (fresh.case_fields.all() != stored.case_fields.all())
    d.push_back(fmt::format("/case fields differ:\n  have {}\n  want {}", stored.case_fields.str(), fresh.case_fields.str()));
  if (fresh.inputs.size() != stored.inputs.size()) d.push_back("different number of inputs");
  for (size_t i = 0; i < fresh.inputs.size(); ++i) {
    const auto& t = fresh.inputs[i];
    const auto* s = stored.input(t.name);
    if (!s) {
      d.push_back(fmt::format("input '{}' missing", t.name));
      continue;
    }
    const auto si = static_cast<size_t>(s - stored.inputs.data());
    if (s->dtype != t.dtype || s->shape != t.shape) d.push_back(fmt::format("input '{}': dtype or shape differs", t.name));
    else if (fresh.input_hashes[i] != stored.input_hashes[si])
      d.push_back(fmt::format("input '{}': bits differ (hash {} vs {})", t.name, fresh.input_hashes[i], stored.input_hashes[si]));
    // A recipe input: the stored recipe must be the case's, so that its recorded hash (compared
    // above with the fresh codes' hash) is the hash of what the stored recipe regenerates.
    const bool fr = i < fresh.input_recipes.size() && fresh.input_recipes[i].has_value();
    const bool sr = si < stored.input_recipes.size() && stored.input_recipes[si].has_value();
    if (fr != sr) d.push_back(fmt::format("input '{}': stored as {}, the case stores it as {}", t.name, sr ? "a recipe" : "values",
                                          fr ? "a recipe" : "values"));
    else if (fr && !(*fresh.input_recipes[i] == *stored.input_recipes[si]))
      d.push_back(fmt::format("input '{}': the stored recipe differs from the case's", t.name));
  }
  if (fresh.outputs.size() != stored.outputs.size()) d.push_back("different number of outputs");
  for (const auto& o : fresh.outputs) {
    const auto* s = stored.output(o.expected.name);
    const auto& nm = o.expected.name;
    if (!s) {
      d.push_back(fmt::format("output '{}' missing", nm));
      continue;
    }
    if (s->expected.dtype != o.expected.dtype || s->expected.shape != o.expected.shape) {
      d.push_back(fmt::format("output '{}': dtype or shape differs", nm));
      continue;
    }
    if (double a = agreement_rel(o.expected.data, s->expected.data); !(a <= rel))
      d.push_back(fmt::format("output '{}': differs by {:.3e} relative (limit {:.0e})", nm, a, rel));
    if (o.bound.has_value() != s->bound.has_value()) d.push_back(fmt::format("bound '{}': present in one only", nm));
    else if (o.bound) {
      if (double a = agreement_rel(*o.bound, *s->bound); !(a <= rel))
        d.push_back(fmt::format("bound '{}': differs by {:.3e} relative", nm, a));
    }
    if (o.rounded.has_value() != s->rounded.has_value() || (o.rounded && *o.rounded != *s->rounded))
      d.push_back(fmt::format("rounded '{}': codes differ", nm));
    if (o.allow_nonfinite != s->allow_nonfinite) d.push_back(fmt::format("output '{}': allow_nonfinite differs", nm));
    if (o.bound2.has_value() != s->bound2.has_value() || (o.bound2 && !(agreement_rel(*o.bound2, *s->bound2) <= rel)))
      d.push_back(fmt::format("bound2 '{}': differs", nm));
    if (o.allowed_mask != s->allowed_mask) d.push_back(fmt::format("allowed_mask '{}': differs", nm));
    if (o.scaled_by != s->scaled_by || o.scale_block != s->scale_block)
      d.push_back(fmt::format("output '{}': scaled by '{}' in blocks of {} (stored: '{}', {})", nm, o.scaled_by,
                              o.scale_block, s->scaled_by, s->scale_block));
    if (o.alt.has_value() != s->alt.has_value() || (o.alt && !(agreement_rel(*o.alt, *s->alt) == 0)))
      d.push_back(fmt::format("alt '{}': differs", nm));
  }
  if (fresh.intermediates.size() != stored.intermediates.size()) d.push_back("different number of intermediates");
  for (const auto& t : fresh.intermediates) {
    const Tensor* s = nullptr;
    for (const auto& u : stored.intermediates)
      if (u.name == t.name) s = &u;
    if (!s || s->shape != t.shape) {
      d.push_back(fmt::format("intermediate '{}' missing or reshaped", t.name));
      continue;
    }
    if (double a = agreement_rel(t.data, s->data); !(a <= rel))
      d.push_back(fmt::format("intermediate '{}': differs by {:.3e} relative", t.name, a));
    if (t.dtype != s->dtype) d.push_back(fmt::format("intermediate '{}': dtype differs", t.name));
    const auto bf = fresh.intermediate_bounds.find(t.name);
    const auto bs = stored.intermediate_bounds.find(t.name);
    if ((bf == fresh.intermediate_bounds.end()) != (bs == stored.intermediate_bounds.end()))
      d.push_back(fmt::format("intermediate bound '{}': present in one golden only", t.name));
    else if (bf != fresh.intermediate_bounds.end())
      if (double a = agreement_rel(bf->second, bs->second); !(a <= rel))
        d.push_back(fmt::format("intermediate bound '{}': differs by {:.3e} relative", t.name, a));
  }
  return d;
}

std::string manifest_line(const Golden& g) {
  std::vector<std::pair<std::string, std::string>> ins;
  for (size_t i = 0; i < g.inputs.size(); ++i) ins.emplace_back(g.inputs[i].name, g.input_hashes[i]);
  std::sort(ins.begin(), ins.end());
  std::string s = golden_rel_path(g.prov.op, g.prov.case_name) + " " + g.prov.level;
  for (const auto& [n, h] : ins) s += " " + n + "=" + h;
  return s;
}

}  // namespace assay
