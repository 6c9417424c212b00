// Host side of the SSD kernels (kernels/ssd/ssd_fwd.h lists the tensors): what a golden must look
// like for them (ssd_supported) and a launch from a golden's device tensors (ssd_launch), shared by
// the registration (ssd.cpp) and the test-only mutants (kernels/mutants/ssd_mutants.cpp).
#pragma once
#include <string>

#include "kernels/registry.h"
#include "kernels/ssd/ssd_fwd.h"

namespace assay::kernels::ssd {

// The case's dimensions and options, from shapes and resolved case fields only.
struct SsdDims {
  int B = 0, T = 0, H = 0, P = 0, N = 0, G = 1, Q = 64, nchunks = 0, nseq = 0;
  bool init = false, seq_idx = false, varlen = false;
};
SsdDims ssd_dims(const KernelCase& g);

// {false, reason} for a golden the tensor-core forward does not take.
Support ssd_supported(const KernelCase& g);

// Enqueues the forward (with mutation m) on c.stream; "" or the error, prefixed with `name`.
std::string ssd_launch(LaunchContext& c, const std::string& name, Mutation m = Mutation::none);

}  // namespace assay::kernels::ssd
