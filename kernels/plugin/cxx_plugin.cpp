// C ABI adapter for C++ KernelDefs: see cxx_plugin.h.
#include "kernels/plugin/cxx_plugin.h"

#include <array>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "reference/core/dtype.h"

namespace assay::kernels {
namespace {

struct Table {
  std::vector<KernelDef> defs;
  std::vector<assay_kernel> ks;
  std::vector<std::vector<const char*>> inter_names;  // per kernel: c_str of defs[i].intermediates
  assay_plugin plugin{};
};
Table& table() {
  static Table t;
  return t;
}

void put(char* dst, size_t n, const std::string& s) {
  if (!dst || n == 0) return;
  const size_t k = std::min(n - 1, s.size());
  std::memcpy(dst, s.data(), k);
  dst[k] = '\0';
}

std::string cs(const char* s) { return s ? std::string(s) : std::string(); }

DType dtype_of(const assay_tensor& t) {
  const auto d = parse_dtype(cs(t.dtype));
  if (!d) throw std::runtime_error("tensor " + cs(t.name) + ": unknown dtype '" + cs(t.dtype) + "'");
  return *d;
}

std::vector<std::string> axes_of(const assay_tensor& t) {
  std::vector<std::string> a;
  for (int32_t i = 0; i < t.rank; ++i) a.push_back(t.axes && t.axes[i] ? t.axes[i] : "");
  return a;
}

Shape shape_of(const assay_tensor& t) { return Shape(t.shape, t.shape + t.rank); }

TensorSpec spec_of(const assay_tensor& t) { return TensorSpec{cs(t.name), axes_of(t), shape_of(t), dtype_of(t)}; }

// The KernelCase assay built, rebuilt from its C view (this library declares ABI version 4, so
// the host filled fields_toml and the intermediates table).
KernelCase kcase_of(const assay_case* c) {
  KernelCase kc;
  kc.op = cs(c->op);
  kc.case_name = cs(c->case_name);
  kc.case_toml = cs(c->case_toml);
  kc.fields = CaseFields::parse(cs(c->fields_toml));
  for (int32_t i = 0; i < c->n_inputs; ++i) kc.inputs.push_back(spec_of(c->inputs[i]));
  for (int32_t i = 0; i < c->n_outputs; ++i) kc.outputs.push_back(spec_of(c->outputs[i]));
  for (int32_t i = 0; i < c->n_intermediates; ++i) kc.intermediates.push_back(spec_of(c->intermediates[i]));
  return kc;
}

DevTensor dev_of(const assay_tensor& t) {
  DevTensor d;
  d.name = cs(t.name);
  d.axes = axes_of(t);
  d.shape = shape_of(t);
  d.dtype = dtype_of(t);
  d.data = t.data;
  return d;
}

template <int I>
int can_impl(const assay_case* c, char* reason, size_t n) {
  try {
    const auto& d = table().defs.at(I);
    if (!d.can_implement) return 1;
    const Support s = d.can_implement(kcase_of(c));
    if (!s.ok) put(reason, n, s.reason);
    return s.ok ? 1 : 0;
  } catch (const std::exception& e) {
    put(reason, n, std::string("can_implement threw: ") + e.what());
    return 0;
  }
}

template <int I>
int launch(const assay_case* c, void* stream, char* err, size_t n) {
  try {
    const auto& d = table().defs.at(I);
    const KernelCase kc = kcase_of(c);
    LaunchContext ctx;
    ctx.kcase = &kc;
    ctx.params = kc.fields;
    for (int32_t i = 0; i < c->n_inputs; ++i) ctx.inputs.push_back(dev_of(c->inputs[i]));
    for (int32_t i = 0; i < c->n_outputs; ++i) ctx.outputs.push_back(dev_of(c->outputs[i]));
    for (int32_t i = 0; i < c->n_intermediates; ++i) ctx.intermediates.push_back(dev_of(c->intermediates[i]));
    ctx.stream = stream;
    const std::string e = d.launch(ctx);
    if (!e.empty()) put(err, n, e);
    return e.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    put(err, n, std::string("launch threw: ") + e.what());
    return 1;
  }
}

using CanFn = int (*)(const assay_case*, char*, size_t);
using LaunchFn = int (*)(const assay_case*, void*, char*, size_t);
template <int... I>
constexpr auto make_fns(std::integer_sequence<int, I...>) {
  return std::pair<std::array<CanFn, sizeof...(I)>, std::array<LaunchFn, sizeof...(I)>>{{&can_impl<I>...}, {&launch<I>...}};
}
const auto kFns = make_fns(std::make_integer_sequence<int, kMaxCxxPluginKernels>{});

}  // namespace

const assay_plugin* export_plugin(const char* plugin_name, std::vector<KernelDef> defs) {
  if (defs.size() > static_cast<size_t>(kMaxCxxPluginKernels))
    throw std::length_error("export_plugin: more than kMaxCxxPluginKernels kernels");
  Table& t = table();
  t.defs = std::move(defs);
  t.ks.clear();
  t.inter_names.assign(t.defs.size(), {});
  for (size_t i = 0; i < t.defs.size(); ++i) {
    const KernelDef& d = t.defs[i];
    assay_kernel k{};
    k.op = d.op.c_str();
    k.name = d.name.c_str();
    k.description = d.description.c_str();
    k.flags = d.deterministic ? 0u : ASSAY_KERNEL_NONDETERMINISTIC;
    for (const auto& r : d.relations)
      k.flags |= r == "batch" ? ASSAY_KERNEL_REL_BATCH : r == "continuation" ? ASSAY_KERNEL_REL_CONTINUATION
                 : r == "varlen" ? ASSAY_KERNEL_REL_VARLEN : 0u;
    if (d.batch_invariant) k.flags |= ASSAY_KERNEL_BATCH_INVARIANT;
    k.can_implement = kFns.first[i];
    k.launch = kFns.second[i];
    k.precision_profile = d.profile.c_str();
    for (const auto& n : d.intermediates) t.inter_names[i].push_back(n.c_str());
    k.intermediates = t.inter_names[i].empty() ? nullptr : t.inter_names[i].data();
    k.n_intermediates = static_cast<int32_t>(t.inter_names[i].size());
    t.ks.push_back(k);
  }
  t.plugin.abi_version = ASSAY_PLUGIN_ABI_VERSION;
  t.plugin.struct_size = sizeof(assay_plugin);
  t.plugin.plugin_name = plugin_name;
  t.plugin.n_kernels = static_cast<int32_t>(t.ks.size());
  t.plugin.kernels = t.ks.data();
  return &t.plugin;
}

}  // namespace assay::kernels
