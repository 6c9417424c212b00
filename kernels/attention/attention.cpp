// Registration of the tensor-core attention forward variants (attention_fwd.cu,
// attention_decode.cu) with the kernel registry: attention_v2, attention_v2_split,
// attention_v3_decode. Tensors and conventions: attention_fwd.h / attention_params.h.
//   q, k, v bf16|fp16 (dense, varlen, packed or paged), sink fp32 [Hq] -> O (dtype of q), LSE fp32.
#include <cuda_runtime.h>

#include <fmt/format.h>

#include "kernels/common/kernel_support.h"
#include "kernels/attention/attention_fwd.h"
#include "kernels/attention/attention_params.h"
#include "kernels/registry.h"

namespace assay::kernels::attention {
namespace {

Support fwd_supported(const KernelCase& g) {
  Support s = forward_case_supported(g);
  if (!s.ok) return s;
  const CaseDims d = case_dims(g);
  if (attention_fwd_padded_dim(d.D, d.Dv) == 0)
    return {false, fmt::format("head dims D = {}, Dv = {}: the tensor-core kernels pad up to 256 at most", d.D, d.Dv)};
  if (static_cast<long long>(d.B) * d.Hq > 65535) return {false, "B * Hq > 65535 (grid.y)"};
  return {};
}

// fwd_supported, then a variant's own limits on the case's dimensions.
std::function<Support(const KernelCase&)> fwd_supported_and(Support (*limits)(const CaseDims&)) {
  return [limits](const KernelCase& g) -> Support {
    if (Support s = fwd_supported(g); !s.ok) return s;
    return limits(case_dims(g));
  };
}

std::string run(LaunchContext& c, const char* name, cudaError_t (*f)(const AttnParams&, cudaStream_t)) {
  AttnParams p;
  if (std::string err = build_params(c, p); !err.empty()) return fmt::format("{}: {}", name, err);
  const cudaError_t e = f(p, static_cast<cudaStream_t>(c.stream));
  return common::cuda_error(name, e);
}

KernelDef make_v2() {
  KernelDef d = common::kernel_def("attention", "attention_v2",
      "FA2-style forward: mma.sync m16n8k16, ldmatrix, cp.async double-buffered 64-key tiles, online softmax in exp2; "
      "128-row query tiles (8 warps; 64 rows for head dim > 128); ignores num_splits");
  d.relations = {"batch"};  // verify/run/relations.h (no varlen relation for attention yet)
  d.batch_invariant = true;  // splits and tiles come from the case fields, not from B
  d.can_implement = fwd_supported;
  d.launch = [](LaunchContext& c) { return run(c, "attention_v2", attention_fwd_v2); };
  return d;
}

KernelDef make_v2_split() {
  KernelDef d = common::kernel_def("attention", "attention_v2_split",
      "v2 over the oracle's split-KV scheme (case tile_n, num_splits): fp32 partials + LSE-weighted combine");
  d.relations = {"batch"};  // verify/run/relations.h (no varlen relation for attention yet)
  d.batch_invariant = true;  // splits and tiles come from the case fields, not from B
  d.can_implement = fwd_supported_and([](const CaseDims& dm) -> Support {
    if (dm.num_splits > 65535) return {false, "num_splits > 65535 (grid.z)"};
    return {};
  });
  // The split partials, when the case's golden holds them (num_splits > 1; O_partial only with
  // store_o_partial): judged in rows of their own and walked by `assay bisect`.
  d.intermediates = {"LSE_partial", "O_partial"};
  d.launch = [](LaunchContext& c) { return run_split_kernel(c, "attention_v2_split", -1); };
  return d;
}

KernelDef make_v3_decode() {
  KernelDef d = common::kernel_def("attention", "attention_v3_decode",
      "decode (Sq <= 16): GQA group packed into the query tile (Sq*G <= 16: 4 warps split each KV tile by keys), "
      "split-KV (case num_splits if > 1, else from the SM count) + combine");
  d.relations = {"batch"};  // verify/run/relations.h (no varlen relation for attention yet)
  d.batch_invariant = false;  // with num_splits <= 1 the split count follows B * Hkv (occupancy): not bitwise
  d.can_implement = fwd_supported_and([](const CaseDims& dm) -> Support {
    if (dm.max_seqlen_q > 16) return {false, fmt::format("decode path: max seqlen_q = {} > 16", dm.max_seqlen_q)};
    if (static_cast<long long>(dm.B) * dm.Hkv > 65535) return {false, "B * Hkv > 65535 (grid.y)"};
    return {};
  });
  d.launch = [](LaunchContext& c) -> std::string {
    AttnParams p;
    if (std::string err = build_params(c, p); !err.empty()) return "attention_v3_decode: " + err;
    const cudaError_t e =
        attention_decode_v3(p, static_cast<cudaStream_t>(c.stream), p.num_splits > 1 ? p.num_splits : 0);
    return common::cuda_error("attention_v3_decode", e);
  };
  return d;
}

}  // namespace
ASSAY_REGISTER_KERNEL(make_v2());
ASSAY_REGISTER_KERNEL(make_v2_split());
ASSAY_REGISTER_KERNEL(make_v3_decode());
}  // namespace assay::kernels::attention
