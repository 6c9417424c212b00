// Host side of the SSD kernels: eligibility from a golden's shapes, dtypes and case fields (never
// from tensor values), and the launch from its device tensors (ssd_launch.h).
#include "kernels/ssd/ssd_launch.h"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include "kernels/common/kernel_support.h"

namespace assay::kernels::ssd {

SsdDims ssd_dims(const KernelCase& g) {
  SsdDims d;
  if (const TensorSpec* x = g.input("x"); x && x->shape.size() == 4)
    d.B = static_cast<int>(x->shape[0]), d.T = static_cast<int>(x->shape[1]), d.H = static_cast<int>(x->shape[2]),
    d.P = static_cast<int>(x->shape[3]);
  if (const TensorSpec* b = g.input("B"); b && b->shape.size() == 4)
    d.G = static_cast<int>(b->shape[2]), d.N = static_cast<int>(b->shape[3]);
  d.Q = static_cast<int>(g.fields.get_int("chunk_size", 64));
  d.nchunks = d.Q > 0 ? (d.T + d.Q - 1) / d.Q : 0;
  d.init = g.input("initial_states") != nullptr;
  d.seq_idx = g.input("seq_idx") != nullptr;
  if (const TensorSpec* cu = g.input("cu_seqlens"); cu && cu->shape.size() == 1) {
    d.varlen = true;
    d.nseq = static_cast<int>(cu->shape[0]) - 1;
  }
  return d;
}

Support ssd_supported(const KernelCase& g) {
  using common::no;
  if (g.fields.get_bool("backward", false)) return no("forward kernel: a backward case needs the SSD backward");
  const TensorSpec* x = g.input("x");
  if (!x || x->shape.size() != 4 || !g.input("B") || !g.input("C") || !g.input("dt") || !g.input("A"))
    return no("not an ssd forward golden (x, B, C, dt, A)");
  if (x->dtype != DType::bf16 && x->dtype != DType::f16)
    return no(fmt::format("x is {}: a bf16 / fp16 tensor-core kernel (fp32 activations would need TF32 or FFMA)",
                          name(x->dtype)));
  for (const char* n : {"B", "C", "z"})
    if (const TensorSpec* t = g.input(n); t && t->dtype != x->dtype)
      return no(fmt::format("{} is {}, x is {}: one element type", n, name(t->dtype), name(x->dtype)));
  for (const char* n : {"dt", "A", "D", "dt_bias", "initial_states"})
    if (const TensorSpec* t = g.input(n); t && t->dtype != DType::f32)
      return no(fmt::format("{} is {} (fp32 only)", n, name(t->dtype)));
  for (const char* n : {"seq_idx", "cu_seqlens"})
    if (const TensorSpec* t = g.input(n); t && t->dtype != DType::i32)
      return no(fmt::format("{} is {} (int32 only)", n, name(t->dtype)));
  const TensorSpec* out = g.output("out");
  if (!out || (out->dtype != x->dtype && out->dtype != DType::f32))
    return no("out must be x's dtype or fp32");
  std::vector<std::pair<std::string, DType>> outs{{"out", out->dtype}, {"final_states", DType::f32}};
  if (g.input("cu_seqlens")) outs.emplace_back("varlen_states", DType::f32);
  if (Support s = common::exact_outputs(g, outs, "ssd"); !s.ok) return s;
  const SsdDims d = ssd_dims(g);
  if (d.Q < 16 || d.Q > 256 || d.Q % 16)
    return no(fmt::format("chunk_size {}: this kernel tiles chunks of 16 to 256 tokens in steps of 16", d.Q));
  if (ssd_padded_p(d.P) == 0) return no(fmt::format("P = {} > 128", d.P));
  if (ssd_padded_n(d.N) == 0) return no(fmt::format("N = {} > 256", d.N));
  if (d.G < 1 || d.H % d.G) return no("H is not a multiple of G");
  if (static_cast<int64_t>(d.B) * d.H > 65535) return no("B * H > 65535 (grid.y)");
  if (d.varlen && d.B != 1) return no("varlen_states with B > 1");
  if (const TensorSpec* D = g.input("D"); D && !(D->shape.size() == 1 || D->shape.size() == 2))
    return no("D must be [H] or [H, P]");
  return {};
}

std::string ssd_launch(LaunchContext& c, const std::string& name, Mutation m) {
  const SsdDims d = ssd_dims(*c.kcase);
  SsdParams p;
  p.B = d.B, p.T = d.T, p.H = d.H, p.P = d.P, p.N = d.N, p.G = d.G, p.Q = d.Q, p.nchunks = d.nchunks, p.nseq = d.nseq;
  const DevTensor* x = c.input("x");
  p.bf16 = x->dtype == DType::bf16;
  p.x = x->data, p.Bm = c.input("B")->data, p.Cm = c.input("C")->data;
  auto f32 = [&](const char* n) -> const float* {
    const DevTensor* t = c.input(n);
    return t ? static_cast<const float*>(t->data) : nullptr;
  };
  p.dt = f32("dt"), p.A = f32("A"), p.D = f32("D"), p.dt_bias = f32("dt_bias"), p.init = f32("initial_states");
  if (const DevTensor* z = c.input("z")) p.z = z->data;
  if (const DevTensor* D = c.input("D")) p.D_per_p = D->shape.size() == 2;
  if (const DevTensor* t = c.input("seq_idx")) p.seq_idx = static_cast<const int32_t*>(t->data);
  if (const DevTensor* t = c.input("cu_seqlens")) p.cu_seqlens = static_cast<const int32_t*>(t->data);
  p.softplus = c.params.get_bool("dt_softplus", true);
  p.dt_min = static_cast<float>(c.params.get_double("dt_min", 0.0));
  p.dt_max = static_cast<float>(c.params.get_double("dt_max", std::numeric_limits<double>::infinity()));
  const DevTensor* out = c.output("out");
  p.out = out->data;
  p.out_type = out->dtype == DType::f32 ? OutType::f32 : OutType::same;
  p.final_states = common::output_ptr<float>(c, "final_states");
  p.varlen_states = common::output_ptr<float>(c, "varlen_states");
  const auto s = static_cast<cudaStream_t>(c.stream);
  common::DevScratch scratch(s);
  cudaError_t e = cudaSuccess;
  const size_t chunk_elems = static_cast<size_t>(d.B) * d.nchunks * d.H * d.P * d.N;
  // The chunk-start states go straight into the golden's intermediate when it holds them in the
  // element type; otherwise into scratch.
  if (const DevTensor* cs = c.intermediate("chunk_states"); cs && cs->dtype == x->dtype)
    p.chunk_states = cs->data;
  else
    p.chunk_states = scratch.get<uint16_t>(chunk_elems, e);
  p.delta = scratch.get<float>(static_cast<size_t>(d.B) * d.T * d.H, e);
  p.acum = scratch.get<float>(static_cast<size_t>(d.B) * d.H * d.nchunks * d.Q, e);
  p.states = scratch.get<float>(chunk_elems, e);
  if (e == cudaSuccess) e = ssd_fwd(p, s, m);
  return common::cuda_error(name, e);
}

}  // namespace assay::kernels::ssd
