// Export C++ KernelDefs (kernels/registry.h) through the C ABI (kernels/plugin/assay_plugin.h).
//
// In-tree plugins that reuse the built-in kernels' launch code (the attention mutants in
// kernels/mutants/, built only for tests) are written as KernelDefs and exported with:
//
//   extern "C" __attribute__((visibility("default"))) const assay_plugin* assay_plugin_entry(void) {
//     static const assay_plugin* p = assay::kernels::export_plugin("my_plugin", {make_a(), make_b()});
//     return p;
//   }
//
// The adapter rebuilds, from the C view assay hands the plugin, what a KernelDef expects: the
// KernelCase (op, case name, resolved case fields, every tensor's name, axes, shape and dtype)
// for can_implement, and a LaunchContext with device pointers for launch. At most
// kMaxCxxPluginKernels kernels per plugin.
#pragma once
#include <vector>

#include "kernels/plugin/assay_plugin.h"
#include "kernels/registry.h"

namespace assay::kernels {

inline constexpr int kMaxCxxPluginKernels = 64;

// Returns a table that lives until the library is unloaded. Throws std::length_error if there
// are more than kMaxCxxPluginKernels kernels.
const assay_plugin* export_plugin(const char* plugin_name, std::vector<KernelDef> defs);

}  // namespace assay::kernels
