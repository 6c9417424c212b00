// Golden assembly (see scaled_add.h): both forms, their agreement, the output and its bound.
#include "reference/scaled_add/scaled_add.h"

namespace assay::scaled_add {

OracleResult oracle(const Tensor& x, const Tensor& y, double alpha, double beta, DType out_dtype) {
  OracleResult r;
  Output o;
  o.expected = Tensor{"out", x.axes, x.shape, out_dtype, ref::scaled_add_loop(x.data, y.data, alpha, beta)};
  const auto alt = ref::scaled_add_eigen(x.data, y.data, alpha, beta);
  r.agreement.push_back({"out", "loop", "eigen", agreement_rel(alt, o.expected.data)});
  o.bound = ref::scaled_add_bound(x.data, y.data, alpha, beta);
  r.outputs.push_back(std::move(o));
  return r;
}

}  // namespace assay::scaled_add
