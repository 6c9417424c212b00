// The one place a golden becomes what a kernel may see (kernels/registry.h KernelCase): the op,
// the case name and text, the resolved /case fields, and every tensor's name, axes, shape and
// dtype. Values, expected outputs, bounds and rounded codes are left behind.
#pragma once
#include "kernels/registry.h"
#include "verify/io/golden.h"

namespace assay {

kernels::KernelCase kernel_case_of(const Golden& g);

}  // namespace assay
