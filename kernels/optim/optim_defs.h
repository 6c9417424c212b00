// Registration helpers shared by the optimizer kernels' definitions (kernels/optim/<optimizer>_defs.cpp,
// one per optimizer, each registering its kernels with the kernel registry).
//
// Goldens: golden/optim/<case>.h5 (fixtures/optim.toml, fixtures/optim/<optimizer>.cpp). Every case
// field is read from the KernelCase without a default: the golden's /case group holds every field
// the fixture binding read, with the binding's default applied, so no default is repeated here.
// Tensors: none of their own; each <optimizer>_defs.cpp lists the tensors of its goldens (storage
// codes; every output written in full). Upstream conventions: those of the launchers
// (optim_kernels.h).
#pragma once
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/kernel_support.h"
#include "kernels/optim/optim_kernels.h"
#include "kernels/registry.h"

namespace assay::kernels::optim {

using common::cuda_error;
using common::DevScratch;
using common::need_outputs;
using common::no;
using common::outputs_within;

// Every optim kernel: op "optim", deterministic (fixed-order reductions), strict profile.
inline KernelDef optim_kernel(std::string name, std::string description) {
  return common::kernel_def("optim", std::move(name), std::move(description));
}

// Each named input / output exists with dtype dt.
inline Support need(const KernelCase& g, const std::vector<std::string>& names, DType dt) {
  return require_dtypes(g, names, {dt});
}

// The KernelDef of one optimizer's kernel: a golden of another optimizer is refused ("<name> runs
// optimizer = <optimizer>") before `can` is asked (P: the golden's case fields).
using CanImplement = Support (*)(const KernelCase& g, const CaseFields& P);
using Launch = std::string (*)(LaunchContext& ctx);
inline KernelDef optimizer_kernel(std::string name, std::string description, std::string optimizer, CanImplement can,
                                  Launch launch) {
  KernelDef d = optim_kernel(name, std::move(description));
  d.can_implement = [name, optimizer, can](const KernelCase& g) -> Support {
    if (g.fields.get_string("optimizer") != optimizer) return no(name + " runs optimizer = " + optimizer);
    return can(g, g.fields);
  };
  d.launch = launch;
  return d;
}

// The case's `semantics` (clip, scaler): torch or megatron.
inline Support torch_or_megatron(const std::string& sem) {
  if (sem != "torch" && sem != "megatron") return no("semantics: torch or megatron");
  return {};
}

// Case fields into a launcher's config: numbers as they are, flags as != 0.
inline void read_numbers(const CaseFields& P, std::initializer_list<std::pair<const char*, double*>> fields) {
  for (const auto& [key, to] : fields) *to = P.get_double(key);
}
inline void read_flags(const CaseFields& P, std::initializer_list<std::pair<const char*, bool*>> fields) {
  for (const auto& [key, to] : fields) *to = P.get_double(key) != 0;
}

// The case's `sizes` as Segments over a buffer of `total` elements; ok = 1..kMaxSegments positive
// sizes summing to total.
inline Segments segments_of(const CaseFields& P, int64_t total, bool& ok) {
  std::vector<double> sz = P.get_list("sizes");
  Segments s;
  ok = !sz.empty() && static_cast<int>(sz.size()) <= kMaxSegments;
  if (!ok) return s;
  int64_t off = 0;
  s.count = static_cast<int>(sz.size());
  for (int k = 0; k < s.count; ++k) {
    s.offset[k] = off;
    s.size[k] = static_cast<int64_t>(sz[k]);
    ok = ok && s.size[k] > 0;
    off += s.size[k];
  }
  ok = ok && off == total;
  return s;
}

}  // namespace assay::kernels::optim
