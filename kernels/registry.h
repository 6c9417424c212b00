// The kernel registry: every GPU kernel under test, built in (kernels/*.cu, registered from a host
// C++ file with ASSAY_REGISTER_KERNEL) or loaded from a C ABI plugin (kernels/plugin/assay_plugin.h).
//
// This header is the whole interface between kernels and the rest of assay: it depends on
// reference/core only, never on verify/ (the runner includes it, not the other way round). It and
// registry.cpp are plain host C++ (no CUDA headers), so CPU-only builds compile the runner and
// report "NotRun: built without CUDA" instead of failing to build.
//
// A kernel sees a KernelCase: the op and case name, the resolved case fields (every field the op's
// fixture binding read, defaults applied: reference/core/case_fields.h) and the name, axes,
// shape and dtype of every input and output. Expected values, bounds and rounded codes are not
// in it, and nothing in it leads to them: a kernel cannot peek at the answer.
//
// A kernel declares:
//   op, name             which goldens it runs on; a unique name (scaled_add_v1)
//   deterministic        outputs must be bitwise identical over repeated runs (default true)
//   relations            the oracle-free relations its outputs satisfy (batch, continuation, varlen)
//   batch_invariant      batch relations hold bit for bit
//   can_implement(kc)    called in the parent (no CUDA context): {false, reason} -> NotSupported
//   launch(ctx)          called in a worker process: enqueue on ctx.stream; "" = ok, else the error
// Device tensors are the golden's tensors: inputs hold the storage codes, outputs are written as
// codes of the golden's kernel-facing output dtype; dense row-major.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference/core/case_fields.h"
#include "reference/core/tensor.h"

namespace assay::kernels {

struct DevTensor {
  std::string name;
  std::vector<std::string> axes;
  Shape shape;
  DType dtype = DType::f64;
  void* data = nullptr;  // device pointer (null where no device memory exists)
  int64_t numel() const { return assay::numel(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * static_cast<size_t>(info(dtype).storage_bytes); }
};

// A tensor's metadata: what a kernel may know of it before launch.
struct TensorSpec {
  std::string name;
  std::vector<std::string> axes;
  Shape shape;
  DType dtype = DType::f64;  // inputs: storage dtype; outputs: the kernel-facing dtype
  int64_t numel() const { return assay::numel(shape); }
};

// What a kernel may see of a case (built by the runner from a golden; no expected values).
struct KernelCase {
  std::string op, case_name;
  std::string case_toml;  // the verbatim [[case]] text (the plugin C ABI hands it on)
  CaseFields fields;      // resolved: every field the op's fixture read, defaults applied
  std::vector<TensorSpec> inputs, outputs;  // sorted by name
  // The golden's intermediates (chunk states, split partials, ...; dtype = the dtype kernels hold
  // them in): a kernel may write any of them (KernelDef::intermediates) to be judged and bisected.
  std::vector<TensorSpec> intermediates;
  const TensorSpec* intermediate(std::string_view n) const;
  const TensorSpec* input(std::string_view n) const;
  const TensorSpec* output(std::string_view n) const;
};

struct LaunchContext {
  const KernelCase* kcase = nullptr;  // the case being launched (never null when a kernel runs)
  CaseFields params;                  // = kcase->fields
  std::vector<DevTensor> inputs, outputs;  // golden order (sorted by name)
  // The intermediates this kernel declared for the case that the golden holds (poisoned like outputs).
  std::vector<DevTensor> intermediates;
  const DevTensor* intermediate(std::string_view n) const;
  void* stream = nullptr;                  // cudaStream_t
  const DevTensor* input(std::string_view n) const;
  const DevTensor* output(std::string_view n) const;
};

struct Support {
  bool ok = true;
  std::string reason;
};

struct KernelDef {
  std::string op, name, description;
  std::string source = "builtin";  // or the plugin path
  bool deterministic = true;
  // How the kernel computes (verify/judge/tolerance.h): "strict", or a profile its op's fixture declares.
  std::string profile = "strict";
  std::function<Support(const KernelCase&)> can_implement;
  std::function<std::string(LaunchContext&)> launch;
  // The golden intermediates the kernel writes (may be empty). Those a case's golden holds are
  // allocated in LaunchContext::intermediates and must be written whole; they are judged by their
  // own tolerance entries, and `assay bisect` walks them.
  std::vector<std::string> intermediates;
  // Relations its outputs satisfy (`assay verify --relations`, verify/run/relations.h): any of
  // "batch" (a sequence's outputs do not depend on what else shares its batch), "continuation"
  // (T1 then T2 tokens with the state handed over = one run of T1 + T2) and "varlen" (a packed
  // case = each sequence run alone). Empty: no relation is run. Each related run sees dense tensors
  // (the layout relation, strided views, is for Python kernels only: python/assay/relations.py).
  std::vector<std::string> relations;
  // Batch invariance is bitwise: a sequence's outputs are the same bits whatever else shares its
  // batch (the batch relations then compare codes with the golden case's run, not only tolerances).
  bool batch_invariant = false;
};

// Registration (built-ins at static-init time, plugins when loaded). Duplicate names throw.
bool register_kernel(KernelDef def);
std::vector<const KernelDef*> all_kernels();  // sorted by (op, name)
const KernelDef* find_kernel(std::string_view name);

// dlopen()s a plugin and registers its kernels (source = path). Throws InputError with one line
// (missing file, no entry symbol, ABI version mismatch, duplicate kernel name). Returns the names.
std::vector<std::string> load_plugin(const std::string& path);

// Helpers for can_implement: every input/output named has this dtype.
Support require_dtypes(const KernelCase& kc, const std::vector<std::string>& names, std::vector<DType> allowed);

}  // namespace assay::kernels

// In a kernel's host .cpp:  ASSAY_REGISTER_KERNEL(make_scaled_add_v1());
#define ASSAY_KCONCAT2(a, b) a##b
#define ASSAY_KCONCAT(a, b) ASSAY_KCONCAT2(a, b)
#define ASSAY_REGISTER_KERNEL(expr) \
  static const bool ASSAY_KCONCAT(assay_kernel_registered_, __LINE__) = ::assay::kernels::register_kernel(expr)
