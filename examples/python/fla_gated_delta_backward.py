#!/usr/bin/env python3
"""fla's chunked gated delta rule (chunk_gated_delta_rule), forward and backward, checked against assay's gated_delta goldens.

    PYTHONPATH=python python3 examples/python/fla_gated_delta_backward.py [--profile bf16-states]   # on a GPU machine

The kernel under test is upstream's `fla.ops.gated_delta_rule.chunk_gated_delta_rule` (the Triton
chunk kernels of Gated DeltaNet / Qwen3-Next training), called as a model calls it, and its
gradients through torch autograd (`chunk_gated_delta_rule_bwd`). It needs torch, triton, einops and
fla (the `fla-core` package: `pip install fla-core`, or its wheel carried to a machine without a
network).

What it claims, decided per golden from `golden.case`: the gated_delta cases with `backward = true`
and a chunk size fla accepts (16, 32, 64); every option maps onto one of fla's: GVA (HV > H),
`qk_l2norm` (use_qk_l2norm_in_kernel), `gate = "in_kernel"` (use_gate_in_kernel with A_log and
dt_bias), `beta_mode` sigmoid / two_sigmoid (use_beta_sigmoid_in_kernel, allow_neg_eigval),
`state_layout = "vk"` (state_v_first), packed sequences (cu_seqlens), `gate = "none"` (g = 0, the
plain delta rule, whose dg the golden does not hold). Not claimed: forward-only cases, other chunk
sizes, and an empty packed sequence (fla's varlen kernels are not expected to handle one).

The loss is L = <do, o> + <dht, final_state>, so the gradients are what autograd returns for
`o.backward(do)` with final_state's gradient dht: exactly the golden's definition. Outputs under
the golden's names: o, final_state, dq, dk, dv, dg, db, dh0, dA_log, ddt_bias.

fla's backward in a bf16 run stores h, T, w, u, v_new, dh and dv_new in bf16: judge it under
`--profile bf16-states` (the default here); under `strict` (a kernel with fp32 hand-offs) it is
expected to fail on the bf16 cases.

fla (0.6.0) refuses its gated backward on Hopper GPUs with Triton >= 3.4.0 and < 3.7.1, which it
says produce incorrect results in chunk_bwd_dqkwg (fla issue #640). `--ignore-triton-guard` lifts
that refusal so the kernel runs anyway and assay judges what it returns.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)  # _claims.py
OP = "gated_delta"
GRADS = {"dq": "q", "dk": "k", "dv": "v", "dg": "g", "db": "beta", "dh0": "initial_state",
         "dA_log": "A_log", "ddt_bias": "dt_bias"}


def supports(case, golden=None):
    if not case.get("backward", False):
        return False, "forward-only case (this example checks the backward)"
    if case.get("mode", "prefill") != "prefill":
        return False, "decode mode"
    cs = int(case.get("chunk_size", 64))
    if cs not in (16, 32, 64):
        return False, f"chunk_size {cs} (fla takes 16, 32 or 64)"
    cu = list(case.get("cu_seqlens", []) or [])
    if any(b == a for a, b in zip(cu, cu[1:])):
        return False, "an empty packed sequence"
    return True, ""


def make_fn(kernel, device="cuda"):
    """fn(golden) -> forward outputs and gradients, for assay.check."""
    from _claims import backward_leaves, leaf_grads

    def fn(golden):
        c, x, leaves = backward_leaves(golden, supports, GRADS, device)
        gate = c.get("gate", "log")
        beta_mode = c.get("beta_mode", "given")
        kw = {}
        if gate == "none":  # g = 0: the plain delta rule (the golden has no g, hence no dg)
            g = torch.zeros(x["beta"].shape, dtype=torch.float32, device=device)
        else:
            g = leaves["g"]
        if gate == "in_kernel":
            kw.update(use_gate_in_kernel=True, A_log=leaves["A_log"], dt_bias=leaves.get("dt_bias"))
        if beta_mode != "given":
            kw.update(use_beta_sigmoid_in_kernel=True, allow_neg_eigval=beta_mode == "two_sigmoid")
        cu = x["cu_seqlens"].to(torch.long).contiguous() if "cu_seqlens" in x else None
        o, final_state = kernel(
            leaves["q"], leaves["k"], leaves["v"], g, leaves["beta"],
            scale=float(c["scale"]) if "scale" in c else None,
            initial_state=leaves.get("initial_state"), output_final_state=True,
            use_qk_l2norm_in_kernel=bool(c.get("qk_l2norm", False)),
            state_v_first=c.get("state_layout", "kv") == "vk",
            cu_seqlens=cu, chunk_size=int(c.get("chunk_size", 64)), **kw)
        dht = x["dht"].to(final_state.dtype) if "dht" in x else torch.zeros_like(final_state)
        torch.autograd.backward([o, final_state], [x["do"].to(o.dtype), dht])
        return {"o": o.detach(), "final_state": final_state.detach(), **leaf_grads(leaves, GRADS)}
    return fn


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", default="bf16-states", help="precision profile to judge under (default bf16-states)")
    ap.add_argument("--out", default=os.path.join("build", "check", "fla_gated_delta_backward"))
    ap.add_argument("--ignore-triton-guard", action="store_true",
                    help="run fla's gated backward on a Triton it refuses on Hopper (fla #640), to judge it")
    args = ap.parse_args(argv)
    os.chdir(REPO)
    import assay  # PYTHONPATH=python
    from _claims import announce_claims, claimed_cases, print_case_verdicts, timed_check

    if not torch.cuda.is_available():
        print("no CUDA device: fla's Triton kernels need a GPU", file=sys.stderr)
        return 125
    import fla
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    if args.ignore_triton_guard:
        import fla.ops.common.chunk_o as chunk_o
        if hasattr(chunk_o, "TRITON_ABOVE_3_7_1") and not chunk_o.TRITON_ABOVE_3_7_1:
            print("--ignore-triton-guard: fla's refusal of this Triton on Hopper (fla #640) is lifted")
            chunk_o.TRITON_ABOVE_3_7_1 = True
    claimed, skipped = claimed_cases(assay, OP, supports)
    if not announce_claims(f"fla {fla.__version__} chunk_gated_delta_rule fwd+bwd (torch {torch.__version__}), "
                           f"profile {args.profile}", OP, claimed, skipped):
        return 2
    report, seconds = timed_check(assay, OP, make_fn(chunk_gated_delta_rule, args.device), claimed, args.out,
                                  os.path.join("golden", OP, claimed[0] + ".h5"),
                                  sync=torch.cuda.synchronize, profile=args.profile, name="fla_chunk_gdn")
    print(f"assay.check over {len(claimed)} claimed cases: {seconds:.3f} s")
    return 1 if print_case_verdicts(report, claimed) else 0


if __name__ == "__main__":
    sys.exit(main())
