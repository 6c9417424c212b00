// Internal helpers shared by the two SSD backward forms (ssd_backward.cpp: backward_recurrent,
// ssd_backward_chunked.cpp: backward_chunked). Not part of the oracle's interface.
#pragma once
#include <cstdint>
#include <vector>

#include "reference/ssd/ssd_backward.h"

namespace assay::ssd::detail {

// Throws InputError on wrongly sized or non-finite upstream gradients (after ssd::validate).
void check_upstream(const Inputs& in, const std::vector<double>& dout,
                    const std::vector<double>& dfinal_states,
                    const std::vector<double>& dvarlen_states);

// Grads sized for `in`, all zero (optional tensors empty where the input is absent).
Grads zero_grads(const Inputs& in);

// t -> the non-empty packed sequence n whose last token t is (-1 elsewhere); all -1 without
// cu_seqlens.
std::vector<int64_t> seq_ending_at(const Inputs& in);

// Epilogue adjoint of one token of head h, out = (y + D x) (.) silu(z), ip = ((b*T+t)*H+h)*P:
// writes dy[P] = dout (.) silu(z) (the adjoint of y), sets dz[ip..] (with z), adds D dy to
// dx[ip..] and dy (.) x to dD_row[P] (with D). `y` (the SSM output y_t, P values) is read only
// with z.
// magnitude: the bound form (backward_bound): |silu(z)| and |silu'(z)| (the inputs are already
// absolute values there).
void epilogue_token(const Inputs& in, int64_t h, int64_t ip, const std::vector<double>& dout,
                    const double* y, double* dy, Grads& gr, double* dD_row,
                    bool magnitude = false);

// Final reductions: dA[h] = sum_b dA_part[b*H+h]; dD from dD_part [B,H,P] (D's shape); then the
// dt chain (clamp, softplus, bias) from dDelta [B,T,H] to ddt and ddt_bias.
// `m` = dt_grad_ignores_clamp / dt_grad_ignores_softplus plants that bug (calibration only).
void finish(const Params& p, const Inputs& in, const std::vector<double>& ddelta,
            const std::vector<double>& dA_part, const std::vector<double>& dD_part, Grads& gr,
            BwdMutant m = BwdMutant::none);

}  // namespace assay::ssd::detail
