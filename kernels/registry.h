// The kernel registry: every GPU kernel under test, built in (kernels/*.cu, registered from a host
// C++ file with ASSAY_REGISTER_KERNEL) or loaded from a C ABI plugin (kernels/plugin/assay_plugin.h).
//
// This header and registry.cpp are plain host C++ (no CUDA headers), so CPU-only builds compile
// the runner and report "NotRun: built without CUDA" instead of failing to build.
//
// A kernel declares:
//   op, name             which goldens it runs on; a unique name (scaled_add_v1)
//   deterministic        outputs must be bitwise identical over repeated runs (default true)
//   can_implement(g)     called in the parent (no CUDA context): {false, reason} -> NotSupported
//   launch(ctx)          called in a worker process: enqueue on ctx.stream; "" = ok, else the error
// Device tensors are the golden's tensors: inputs hold the storage codes, outputs are written as
// codes of the golden's kernel-facing output dtype; dense row-major.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference/core/tensor.h"
#include "verify/golden.h"

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

// The case's top-level TOML fields: numbers and booleans (alpha, eps, causal=1/0 ...), strings
// (recipe = "nvfp4") and arrays of numbers (seqlens_k = [70, 9, 0]).
class CaseParams {
 public:
  static CaseParams parse(const std::string& case_toml);  // throws InputError on malformed TOML
  bool has(const std::string& k) const { return v_.count(k) != 0; }
  double get_double(const std::string& k, double dflt) const;
  int64_t get_int(const std::string& k, int64_t dflt) const;
  // String fields (recipe = "nvfp4") and arrays of numbers (window = [8, -1]).
  bool has_string(const std::string& k) const { return s_.count(k) != 0; }
  std::string get_string(const std::string& k, const std::string& dflt) const;
  bool has_list(const std::string& k) const { return l_.count(k) != 0; }
  std::vector<double> get_list(const std::string& k) const;  // empty if absent
  const std::map<std::string, double>& all() const { return v_; }

 private:
  std::map<std::string, double> v_;
  std::map<std::string, std::string> s_;
  std::map<std::string, std::vector<double>> l_;
};

struct LaunchContext {
  const Golden* golden = nullptr;
  CaseParams params;
  std::vector<DevTensor> inputs, outputs;  // golden order (sorted by name)
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
  // How the kernel computes (verify/tolerance.h): "strict", or a profile its op's fixture declares.
  std::string profile = "strict";
  std::function<Support(const Golden&)> can_implement;
  std::function<std::string(LaunchContext&)> launch;
};

// Registration (built-ins at static-init time, plugins when loaded). Duplicate names throw.
bool register_kernel(KernelDef def);
std::vector<const KernelDef*> all_kernels();  // sorted by (op, name)
const KernelDef* find_kernel(std::string_view name);

// dlopen()s a plugin and registers its kernels (source = path). Throws InputError with one line
// (missing file, no entry symbol, ABI version mismatch, duplicate kernel name). Returns the names.
std::vector<std::string> load_plugin(const std::string& path);

// Helpers for can_implement: every input/output named has this dtype.
Support require_dtypes(const Golden& g, const std::vector<std::string>& names, std::vector<DType> allowed);

}  // namespace assay::kernels

// In a kernel's host .cpp:  ASSAY_REGISTER_KERNEL(make_scaled_add_v1());
#define ASSAY_KCONCAT2(a, b) a##b
#define ASSAY_KCONCAT(a, b) ASSAY_KCONCAT2(a, b)
#define ASSAY_REGISTER_KERNEL(expr) \
  static const bool ASSAY_KCONCAT(assay_kernel_registered_, __LINE__) = ::assay::kernels::register_kernel(expr)
