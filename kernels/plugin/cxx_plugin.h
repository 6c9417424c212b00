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
// The adapter rebuilds, from the C view assay hands the plugin, what a KernelDef expects:
// can_implement gets a Golden with provenance (op, case name, case TOML) and every tensor's name,
// axes, shape and dtype, but NO values (the parent's C view carries none); launch gets a
// LaunchContext with device pointers, CaseParams parsed from the case TOML and golden == nullptr.
// A KernelDef used through this adapter must therefore decide from shapes, dtypes and case fields
// alone, as the C ABI requires of every plugin. At most kMaxCxxPluginKernels kernels per plugin.
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
