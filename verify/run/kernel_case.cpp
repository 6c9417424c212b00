#include "verify/run/kernel_case.h"

#include <algorithm>

namespace assay {

kernels::KernelCase kernel_case_of(const Golden& g) {
  kernels::KernelCase kc;
  kc.op = g.prov.op;
  kc.case_name = g.prov.case_name;
  kc.case_toml = g.prov.case_toml;
  kc.fields = g.case_fields;
  for (const auto& t : g.inputs) kc.inputs.push_back({t.name, t.axes, t.shape, t.dtype});
  // A sampled golden's outputs: the kernel writes the whole tensor (Output::full_shape).
  for (const auto& o : g.outputs)
    kc.outputs.push_back({o.expected.name, o.sampled ? o.full_axes : o.expected.axes, o.sampled ? o.full_shape : o.expected.shape,
                          o.expected.dtype});
  for (const auto& t : g.intermediates) kc.intermediates.push_back({t.name, t.axes, t.shape, t.dtype});
  auto by_name = [](const kernels::TensorSpec& a, const kernels::TensorSpec& b) { return a.name < b.name; };
  std::sort(kc.inputs.begin(), kc.inputs.end(), by_name);
  std::sort(kc.outputs.begin(), kc.outputs.end(), by_name);
  std::sort(kc.intermediates.begin(), kc.intermediates.end(), by_name);
  return kc;
}

}  // namespace assay
