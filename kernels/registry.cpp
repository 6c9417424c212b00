#include "kernels/registry.h"

#include <dlfcn.h>

#include <cstddef>
#include <algorithm>
#include <mutex>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "kernels/plugin/assay_plugin.h"
#include "reference/core/check.h"

namespace assay::kernels {

CaseParams CaseParams::parse(const std::string& case_toml) {
  CaseParams p;
  toml::table t;
  try {
    t = toml::parse(case_toml);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("case_toml: {}", e.description()));
  }
  // A golden's case text is one [[case]] table.
  const toml::table* c = &t;
  if (auto* arr = t["case"].as_array(); arr && !arr->empty() && arr->get(0)->is_table()) c = arr->get(0)->as_table();
  for (const auto& [k, v] : *c) {
    if (auto d = v.value<double>(); d && (v.is_floating_point() || v.is_integer())) p.v_[std::string(k.str())] = *d;
    else if (auto b = v.value<bool>(); b && v.is_boolean()) p.v_[std::string(k.str())] = *b ? 1.0 : 0.0;
    else if (auto str = v.value<std::string>(); str && v.is_string()) p.s_[std::string(k.str())] = *str;
    else if (auto* arr = v.as_array()) {
      std::vector<double> xs;
      bool numeric = true;
      for (const auto& e : *arr) {
        if (auto d = e.value<double>(); d && (e.is_floating_point() || e.is_integer())) xs.push_back(*d);
        else numeric = false;
      }
      if (numeric) p.l_[std::string(k.str())] = std::move(xs);
    }
  }
  return p;
}

double CaseParams::get_double(const std::string& k, double dflt) const {
  auto it = v_.find(k);
  return it == v_.end() ? dflt : it->second;
}
int64_t CaseParams::get_int(const std::string& k, int64_t dflt) const {
  auto it = v_.find(k);
  return it == v_.end() ? dflt : static_cast<int64_t>(it->second);
}

std::string CaseParams::get_string(const std::string& k, const std::string& dflt) const {
  auto it = s_.find(k);
  return it == s_.end() ? dflt : it->second;
}
std::vector<double> CaseParams::get_list(const std::string& k) const {
  auto it = l_.find(k);
  return it == l_.end() ? std::vector<double>{} : it->second;
}

const DevTensor* LaunchContext::input(std::string_view n) const {
  for (const auto& t : inputs)
    if (t.name == n) return &t;
  return nullptr;
}
const DevTensor* LaunchContext::output(std::string_view n) const {
  for (const auto& t : outputs)
    if (t.name == n) return &t;
  return nullptr;
}

namespace {
std::mutex g_mu;
std::vector<std::unique_ptr<KernelDef>>& table() {
  static std::vector<std::unique_ptr<KernelDef>> t;
  return t;
}
}  // namespace

bool register_kernel(KernelDef def) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (const auto& k : table())
    if (k->name == def.name)
      throw InputError(fmt::format("kernel '{}' is registered twice ({} and {})", def.name, k->source, def.source));
  table().push_back(std::make_unique<KernelDef>(std::move(def)));
  return true;
}

std::vector<const KernelDef*> all_kernels() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::vector<const KernelDef*> v;
  for (const auto& k : table()) v.push_back(k.get());
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return std::tie(a->op, a->name) < std::tie(b->op, b->name); });
  return v;
}

const KernelDef* find_kernel(std::string_view name) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (const auto& k : table())
    if (k->name == name) return k.get();
  return nullptr;
}

Support require_dtypes(const Golden& g, const std::vector<std::string>& names, std::vector<DType> allowed) {
  for (const auto& n : names) {
    DType d;
    if (const auto* t = g.input(n)) d = t->dtype;
    else if (const auto* o = g.output(n)) d = o->expected.dtype;
    else return {false, fmt::format("the golden has no tensor '{}'", n)};
    if (std::find(allowed.begin(), allowed.end(), d) == allowed.end()) {
      std::string al;
      for (auto a : allowed) al += (al.empty() ? "" : "/") + std::string(name(a));
      return {false, fmt::format("'{}' is {}; this kernel implements {} only", n, name(d), al)};
    }
  }
  return {};
}

// ---- C ABI plugins -------------------------------------------------------------------------------

namespace {

// Owns the strings and arrays an assay_case points into.
struct CaseView {
  CaseParams params;
  std::string op, case_name, case_toml;
  std::vector<std::string> names, dtypes;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<std::string>> axes;
  std::vector<std::vector<const char*>> axes_c;
  std::vector<assay_tensor> ins, outs;
  assay_case c{};

  static int get_double(const assay_case* c, const char* key, double* out) {
    const auto* v = static_cast<const CaseView*>(c->host);
    if (!key || !v->params.has(key)) return 0;
    if (out) *out = v->params.get_double(key, 0);
    return 1;
  }
  static int get_int(const assay_case* c, const char* key, int64_t* out) {
    const auto* v = static_cast<const CaseView*>(c->host);
    if (!key || !v->params.has(key)) return 0;
    if (out) *out = v->params.get_int(key, 0);
    return 1;
  }

  // Tensors by (name, axes, shape, dtype, data).
  void add(std::vector<assay_tensor>& dst, const std::string& n, const std::vector<std::string>& ax, const Shape& s,
           DType d, void* data) {
    names.push_back(n);
    dtypes.emplace_back(name(d));
    shapes.push_back(s);
    axes.push_back(ax);
    assay_tensor t{};
    t.rank = static_cast<int32_t>(s.size());
    t.numel = numel(s);
    t.elem_bytes = info(d).storage_bytes;
    t.data = data;
    dst.push_back(t);
  }
  // Pointers are fixed up once every vector has its final size.
  void finish() {
    size_t k = 0;
    axes_c.clear();
    for (auto& a : axes) {
      axes_c.emplace_back();
      for (auto& s : a) axes_c.back().push_back(s.c_str());
    }
    for (auto* v : {&ins, &outs})
      for (auto& t : *v) {
        t.name = names[k].c_str();
        t.dtype = dtypes[k].c_str();
        t.shape = shapes[k].data();
        t.axes = axes_c[k].data();
        ++k;
      }
    c.op = op.c_str();
    c.case_name = case_name.c_str();
    c.case_toml = case_toml.c_str();
    c.n_inputs = static_cast<int32_t>(ins.size());
    c.inputs = ins.data();
    c.n_outputs = static_cast<int32_t>(outs.size());
    c.outputs = outs.data();
    c.get_double = &CaseView::get_double;
    c.get_int = &CaseView::get_int;
    c.host = this;
  }
  void set_prov(const Golden& g) {
    op = g.prov.op;
    case_name = g.prov.case_name;
    case_toml = g.prov.case_toml;
  }
};

std::unique_ptr<CaseView> view_of(const Golden& g) {
  auto v = std::make_unique<CaseView>();
  v->set_prov(g);
  v->params = CaseParams::parse(g.prov.case_toml);
  for (const auto& t : g.inputs) v->add(v->ins, t.name, t.axes, t.shape, t.dtype, nullptr);
  for (const auto& o : g.outputs) v->add(v->outs, o.expected.name, o.expected.axes, o.expected.shape, o.expected.dtype, nullptr);
  v->finish();
  return v;
}

std::unique_ptr<CaseView> view_of(const LaunchContext& ctx) {
  auto v = std::make_unique<CaseView>();
  if (ctx.golden) v->set_prov(*ctx.golden);
  v->params = ctx.params;
  for (const auto& t : ctx.inputs) v->add(v->ins, t.name, t.axes, t.shape, t.dtype, t.data);
  for (const auto& t : ctx.outputs) v->add(v->outs, t.name, t.axes, t.shape, t.dtype, t.data);
  v->finish();
  return v;
}

std::string cstr(const char* s) { return s ? std::string(s) : std::string(); }

}  // namespace

std::vector<std::string> load_plugin(const std::string& path) {
  // RTLD_LOCAL: a plugin's symbols (its own static CUDA runtime included) stay private to it.
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw InputError(fmt::format("{}: cannot load plugin: {}", path, cstr(dlerror())));
  auto entry = reinterpret_cast<assay_plugin_entry_fn>(dlsym(h, ASSAY_PLUGIN_ENTRY_SYMBOL));
  if (!entry) throw InputError(fmt::format("{}: not an assay plugin (no symbol {})", path, ASSAY_PLUGIN_ENTRY_SYMBOL));
  const assay_plugin* p = entry();
  if (!p) throw InputError(fmt::format("{}: {}() returned NULL", path, ASSAY_PLUGIN_ENTRY_SYMBOL));
  if (p->abi_version != 1u && p->abi_version != ASSAY_PLUGIN_ABI_VERSION)
    throw InputError(fmt::format("{}: plugin ABI version {} (this assay reads 1 and {})", path, p->abi_version,
                                 ASSAY_PLUGIN_ABI_VERSION));
  // Version 1's assay_kernel is version 2's without the trailing precision_profile.
  const size_t kstride = p->abi_version == 1u ? offsetof(assay_kernel, precision_profile) : sizeof(assay_kernel);
  if (p->struct_size < sizeof(assay_plugin))
    throw InputError(fmt::format("{}: plugin table is {} bytes, expected >= {}", path, p->struct_size, sizeof(assay_plugin)));
  if (p->n_kernels < 0 || (p->n_kernels > 0 && !p->kernels))
    throw InputError(fmt::format("{}: plugin declares {} kernels without a table", path, p->n_kernels));
  std::vector<std::string> names;
  for (int32_t i = 0; i < p->n_kernels; ++i) {
    const auto* k = reinterpret_cast<const assay_kernel*>(reinterpret_cast<const char*>(p->kernels) + kstride * static_cast<size_t>(i));
    if (!k->op || !k->name || !k->launch)
      throw InputError(fmt::format("{}: kernel #{}: op, name and launch are required", path, i));
    KernelDef d;
    d.op = k->op;
    d.name = k->name;
    d.description = cstr(k->description);
    d.source = path;
    d.deterministic = (k->flags & ASSAY_KERNEL_NONDETERMINISTIC) == 0;
    if (p->abi_version >= 2u && k->precision_profile && *k->precision_profile) d.profile = k->precision_profile;
    d.can_implement = [k](const Golden& g) -> Support {
      if (!k->can_implement) return {};
      auto v = view_of(g);
      char reason[512] = {0};
      const int ok = k->can_implement(&v->c, reason, sizeof reason);
      reason[sizeof reason - 1] = 0;
      if (ok) return {};
      return {false, reason[0] ? std::string(reason) : std::string("the plugin's can_implement said no")};
    };
    d.launch = [k](LaunchContext& ctx) -> std::string {
      auto v = view_of(ctx);
      char err[1024] = {0};
      const int rc = k->launch(&v->c, ctx.stream, err, sizeof err);
      err[sizeof err - 1] = 0;
      if (rc == 0) return {};
      return err[0] ? std::string(err) : fmt::format("plugin launch returned {}", rc);
    };
    register_kernel(std::move(d));
    names.push_back(k->name);
  }
  return names;  // the library stays loaded for the life of the process
}

}  // namespace assay::kernels
