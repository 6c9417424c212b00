// kernels/common/kernel_support.h: what every kernel family's registration code (kernels/<op>/<op>.cpp)
// needs around kernels/registry.h: eligibility checks that answer a golden with a reason, the CUDA
// error text of a launch, typed output pointers and stream-ordered scratch memory.
//
// Tensors: none of its own; it reads the KernelCase (TensorSpec: name, dtype, shape) and the
// LaunchContext (DevTensor: device pointer, dtype, shape) of kernels/registry.h.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/registry.h"

namespace assay::kernels::common {

// A kernel's definition before its can_implement and launch: op, name, one-line description, and
// whether it is bitwise deterministic (the runner's repeat check).
inline KernelDef kernel_def(std::string op, std::string name, std::string description, bool deterministic = true) {
  KernelDef d;
  d.op = std::move(op);
  d.name = std::move(name);
  d.description = std::move(description);
  d.deterministic = deterministic;
  return d;
}

// A refusal with its reason ("this kernel cannot run this golden because ...").
inline Support no(std::string why) { return {false, std::move(why)}; }

// Every output of the golden is one that `kernel` writes.
inline Support outputs_within(const KernelCase& g, const std::set<std::string>& known, const std::string& kernel) {
  for (const auto& o : g.outputs)
    if (!known.count(o.name)) return no(fmt::format("{}: does not produce output '{}'", kernel, o.name));
  return {};
}

// Each named output exists and has dtype `dt` (several names are both an input and an output:
// optim's p, m, v).
inline Support need_outputs(const KernelCase& g, const std::vector<std::string>& names, DType dt) {
  for (const auto& n : names) {
    const TensorSpec* o = g.output(n);
    if (!o) return no(fmt::format("the golden has no output '{}'", n));
    if (o->dtype != dt) return no(fmt::format("output '{}' is {}; this kernel writes {}", n, name(o->dtype), name(dt)));
  }
  return {};
}

// The golden's outputs are exactly `outs`: each present with its dtype (checked in order, as
// need_outputs), and no other (outputs_within).
inline Support exact_outputs(const KernelCase& g, const std::vector<std::pair<std::string, DType>>& outs,
                             const std::string& kernel) {
  std::set<std::string> known;
  for (const auto& [n, dt] : outs) {
    if (auto s = need_outputs(g, {n}, dt); !s.ok) return s;
    known.insert(n);
  }
  return outputs_within(g, known, kernel);
}

// "" on success, else "<who>: <CUDA error string>" (a launch's error answer).
inline std::string cuda_error(const std::string& who, cudaError_t e) {
  return e == cudaSuccess ? std::string() : fmt::format("{}: {}", who, cudaGetErrorString(e));
}

// The device pointer of output `n`, or nullptr when the golden does not have that output.
template <class T>
T* output_ptr(LaunchContext& c, const char* n) {
  const DevTensor* t = c.output(n);
  return t ? static_cast<T*>(t->data) : nullptr;
}

// Stream-ordered scratch, freed (stream-ordered) when the launch returns. The first failed
// allocation is kept in `e`; later get() calls return nullptr without allocating.
struct DevScratch {
  cudaStream_t s;
  std::vector<void*> ptrs;
  explicit DevScratch(cudaStream_t st) : s(st) {}
  DevScratch(const DevScratch&) = delete;
  DevScratch& operator=(const DevScratch&) = delete;
  template <typename T>
  T* get(size_t count, cudaError_t& e) {
    void* p = nullptr;
    if (e == cudaSuccess) e = cudaMallocAsync(&p, std::max<size_t>(count, 1) * sizeof(T), s);
    if (p) ptrs.push_back(p);
    return static_cast<T*>(p);
  }
  ~DevScratch() {
    for (void* p : ptrs) cudaFreeAsync(p, s);
  }
};

}  // namespace assay::kernels::common
