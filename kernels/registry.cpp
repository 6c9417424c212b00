#include "kernels/registry.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <cstddef>
#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "kernels/plugin/assay_plugin.h"
#include "reference/core/check.h"

namespace assay::kernels {

template <class T>
static const T* by_name(const std::vector<T>& ts, std::string_view n) {
  for (const auto& t : ts)
    if (t.name == n) return &t;
  return nullptr;
}
const TensorSpec* KernelCase::input(std::string_view n) const { return by_name(inputs, n); }
const TensorSpec* KernelCase::output(std::string_view n) const { return by_name(outputs, n); }
const DevTensor* LaunchContext::input(std::string_view n) const { return by_name(inputs, n); }
const DevTensor* LaunchContext::output(std::string_view n) const { return by_name(outputs, n); }
const TensorSpec* KernelCase::intermediate(std::string_view n) const { return by_name(intermediates, n); }
const DevTensor* LaunchContext::intermediate(std::string_view n) const { return by_name(intermediates, n); }

namespace {
std::mutex g_mu;
std::vector<std::unique_ptr<KernelDef>>& table() {
  static std::vector<std::unique_ptr<KernelDef>> t;
  return t;
}
}  // namespace

bool register_kernel(KernelDef def) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (const auto& r : def.relations)
    if (r != "batch" && r != "continuation" && r != "varlen")
      throw InputError(fmt::format("kernel '{}' ({}): relation '{}': expected batch, continuation or varlen", def.name, def.source, r));
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

Support require_dtypes(const KernelCase& kc, const std::vector<std::string>& names, std::vector<DType> allowed) {
  for (const auto& n : names) {
    DType d;
    if (const auto* t = kc.input(n)) d = t->dtype;
    else if (const auto* o = kc.output(n)) d = o->dtype;
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
  CaseFields params;
  std::string op, case_name, case_toml, fields_toml;
  std::vector<double> list;  // get_list's answer, valid until the next call
  std::vector<std::string> names, dtypes;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<std::string>> axes;
  std::vector<std::vector<const char*>> axes_c;
  std::vector<assay_tensor> ins, outs, inters;
  assay_case c{};

  // The ABI's number getters: 1 and *out when the field exists and reads as T, else 0 (a fractional
  // number asked for as an integer, a string asked for as a number).
  template <class T, T (CaseFields::*get)(const std::string&) const>
  static int get_number(const assay_case* c, const char* key, T* out) {
    const auto* v = static_cast<const CaseView*>(c->host);
    if (!key || !v->params.has(key)) return 0;
    try {
      const T x = (v->params.*get)(key);
      if (out) *out = x;
      return 1;
    } catch (const InputError&) {
      return 0;
    }
  }
  static int get_int(const assay_case* c, const char* key, int64_t* out) {
    return get_number<int64_t, &CaseFields::get_int>(c, key, out);
  }
  static int get_double_v(const assay_case* c, const char* key, double* out) {
    return get_number<double, &CaseFields::get_double>(c, key, out);
  }
  static int get_string(const assay_case* c, const char* key, const char** out) {
    const auto* v = static_cast<const CaseView*>(c->host);
    if (!key || !v->params.has_string(key)) return 0;
    auto* self = const_cast<CaseView*>(v);
    self->str_answer = v->params.get_string(key);
    if (out) *out = self->str_answer.c_str();
    return 1;
  }
  static int get_list(const assay_case* c, const char* key, const double** values, int64_t* n) {
    auto* v = const_cast<CaseView*>(static_cast<const CaseView*>(c->host));
    if (!key || !v->params.has_list(key)) return 0;
    v->list = v->params.get_list(key);
    if (values) *values = v->list.data();
    if (n) *n = static_cast<int64_t>(v->list.size());
    return 1;
  }
  std::string str_answer;

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
    for (auto* v : {&ins, &outs, &inters})
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
    c.get_double = &CaseView::get_double_v;
    c.get_int = &CaseView::get_int;
    c.host = this;
    c.fields_toml = fields_toml.c_str();
    c.get_string = &CaseView::get_string;
    c.get_list = &CaseView::get_list;
    c.n_intermediates = static_cast<int32_t>(inters.size());
    c.intermediates = inters.empty() ? nullptr : inters.data();
  }
  void set_case(const KernelCase& kc) {
    op = kc.op;
    case_name = kc.case_name;
    case_toml = kc.case_toml;
    params = kc.fields;
    fields_toml = kc.fields.str();
  }
};

std::unique_ptr<CaseView> view_of(const KernelCase& kc) {
  auto v = std::make_unique<CaseView>();
  v->set_case(kc);
  for (const auto& t : kc.inputs) v->add(v->ins, t.name, t.axes, t.shape, t.dtype, nullptr);
  for (const auto& t : kc.outputs) v->add(v->outs, t.name, t.axes, t.shape, t.dtype, nullptr);
  for (const auto& t : kc.intermediates) v->add(v->inters, t.name, t.axes, t.shape, t.dtype, nullptr);
  v->finish();
  return v;
}

std::unique_ptr<CaseView> view_of(const LaunchContext& ctx) {
  auto v = std::make_unique<CaseView>();
  if (ctx.kcase) v->set_case(*ctx.kcase);
  v->params = ctx.params;
  v->fields_toml = ctx.params.str();
  for (const auto& t : ctx.inputs) v->add(v->ins, t.name, t.axes, t.shape, t.dtype, t.data);
  for (const auto& t : ctx.outputs) v->add(v->outs, t.name, t.axes, t.shape, t.dtype, t.data);
  for (const auto& t : ctx.intermediates) v->add(v->inters, t.name, t.axes, t.shape, t.dtype, t.data);
  v->finish();
  return v;
}

std::string cstr(const char* s) { return s ? std::string(s) : std::string(); }

}  // namespace

std::vector<std::string> load_plugin(const std::string& path) {
  // Only a regular file is handed to the loader: a FIFO would block dlopen's read forever, a
  // device or a directory cannot be a plugin.
  // (A bare name that is no file here is left to dlopen's library search.)
  {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw InputError(fmt::format("{}: cannot load plugin: not a regular file (a FIFO, device, socket or directory)", path));
  }
  // RTLD_LOCAL: a plugin's symbols (its own static CUDA runtime included) stay private to it.
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw InputError(fmt::format("{}: cannot load plugin: {}", path, cstr(dlerror())));
  auto entry = reinterpret_cast<assay_plugin_entry_fn>(dlsym(h, ASSAY_PLUGIN_ENTRY_SYMBOL));
  if (!entry) throw InputError(fmt::format("{}: not an assay plugin (no symbol {})", path, ASSAY_PLUGIN_ENTRY_SYMBOL));
  const assay_plugin* p = entry();
  if (!p) throw InputError(fmt::format("{}: {}() returned NULL", path, ASSAY_PLUGIN_ENTRY_SYMBOL));
  if (p->abi_version < 1u || p->abi_version > ASSAY_PLUGIN_ABI_VERSION)
    throw InputError(fmt::format("{}: plugin ABI version {} (this assay reads 1 to {})", path, p->abi_version,
                                 ASSAY_PLUGIN_ABI_VERSION));
  // Version 1's assay_kernel ends before precision_profile, versions 2 and 3 before intermediates.
  const size_t kstride = p->abi_version == 1u   ? offsetof(assay_kernel, precision_profile)
                         : p->abi_version <= 3u ? offsetof(assay_kernel, intermediates)
                                                : sizeof(assay_kernel);
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
    if (k->flags & ASSAY_KERNEL_REL_BATCH) d.relations.emplace_back("batch");
    if (k->flags & ASSAY_KERNEL_REL_CONTINUATION) d.relations.emplace_back("continuation");
    if (k->flags & ASSAY_KERNEL_REL_VARLEN) d.relations.emplace_back("varlen");
    d.batch_invariant = (k->flags & ASSAY_KERNEL_BATCH_INVARIANT) != 0;
    if (p->abi_version >= 2u && k->precision_profile && *k->precision_profile) d.profile = k->precision_profile;
    if (p->abi_version >= 4u && k->n_intermediates > 0) {
      if (!k->intermediates)
        throw InputError(fmt::format("{}: kernel '{}' declares {} intermediates without a table", path, k->name, k->n_intermediates));
      std::vector<std::string> inter;
      for (int32_t j = 0; j < k->n_intermediates; ++j) {
        if (!k->intermediates[j] || !*k->intermediates[j])
          throw InputError(fmt::format("{}: kernel '{}': intermediate name #{} is empty", path, k->name, j));
        inter.emplace_back(k->intermediates[j]);
      }
      d.intermediates = std::move(inter);
    }
    d.can_implement = [k](const KernelCase& kc) -> Support {
      if (!k->can_implement) return {};
      auto v = view_of(kc);
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
