#!/usr/bin/env python3
"""mamba_ssm's Triton SSD (mamba_chunk_scan_combined), forward and backward, checked against assay's ssd goldens.

    PYTHONPATH=python python3 examples/python/mamba_ssd_backward.py [--mamba-ssm DIR]   # on a GPU machine

The kernel under test is upstream's `mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined`
(the Mamba-2 SSD scan every Mamba-2 training run uses), called as a model calls it, and its
gradients through torch autograd (`_mamba_chunk_scan_combined_bwd`). It needs torch, triton and
einops; the package itself may be installed, or given as a source tree with --mamba-ssm DIR (the
folder that holds `mamba_ssm/`): only the Triton files are imported (their package __init__ files,
which import the compiled CUDA extensions, are bypassed), so no build is needed.

What it claims, decided per golden from `golden.case`: the ssd cases with `backward = true`
(forward outputs out / final_states and the gradients dx, ddt, dA, dB, dC, dD, dz, ddt_bias,
dinitial_states under the golden's names), any chunk size, G < H, D [H] or [H, P], z, dt_bias,
dt_softplus, dt_limit, initial states and packed sequences (seq_idx). Not claimed: forward-only
cases (use the forward path of any SSD example for those) and varlen_states (upstream's backward
does not support return_varlen_states).

The loss is L = <dout, out> + <dfinal_states, final_states>, so the gradients are what autograd
returns for `out.backward(dout)` with `final_states`' gradient dfinal_states: exactly the
golden's definition.
"""
import argparse
import importlib.util
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)  # _claims.py
OP = "ssd"
GRADS = {"dx": "x", "ddt": "dt", "dA": "A", "dB": "B", "dC": "C", "dD": "D", "dz": "z",
         "ddt_bias": "dt_bias", "dinitial_states": "initial_states"}
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def load_mamba_chunk_scan_combined(src=None):
    """The upstream function, from an installed mamba_ssm or from the source tree `src`."""
    if src is None:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
        return mamba_chunk_scan_combined
    root = os.path.join(os.path.abspath(src), "mamba_ssm")
    if not os.path.isdir(root):
        raise SystemExit(f"--mamba-ssm {src}: no mamba_ssm/ folder there")
    # Empty packages stand in for mamba_ssm, mamba_ssm.ops, mamba_ssm.ops.triton, so their
    # __init__ files (which import the compiled selective-scan extension) do not run.
    for name, path in [("mamba_ssm", root), ("mamba_ssm.ops", os.path.join(root, "ops")),
                       ("mamba_ssm.ops.triton", os.path.join(root, "ops", "triton"))]:
        m = types.ModuleType(name)
        m.__path__ = [path]
        sys.modules[name] = m
    spec = importlib.util.spec_from_file_location(
        "mamba_ssm.ops.triton.ssd_combined", os.path.join(root, "ops", "triton", "ssd_combined.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.mamba_chunk_scan_combined


def supports(case, golden=None):
    if not case.get("backward", False):
        return False, "forward-only case (this example checks the backward)"
    if case.get("varlen_states", False):
        return False, "varlen_states (upstream's backward does not support it)"
    return True, ""


def make_fn(kernel, device="cuda"):
    """fn(golden) -> forward outputs and gradients, for assay.check."""
    from _claims import backward_leaves, leaf_grads

    def fn(golden):
        c, x, leaves = backward_leaves(golden, supports, GRADS, device)
        seq_idx = x["seq_idx"].to(torch.int32).contiguous() if "seq_idx" in x else None
        dt_limit = (float(c.get("dt_min", 0.0)), float(c.get("dt_max", float("inf"))))
        out, final_states = kernel(
            leaves["x"], leaves["dt"], leaves["A"], leaves["B"], leaves["C"], int(c.get("chunk_size", 64)),
            D=leaves.get("D"), z=leaves.get("z"), dt_bias=leaves.get("dt_bias"),
            initial_states=leaves.get("initial_states"), seq_idx=seq_idx,
            dt_softplus=bool(c.get("dt_softplus", True)), dt_limit=dt_limit, return_final_states=True)
        grads_out = [out, final_states]
        grads_in = [x["dout"].to(out.dtype), x["dfinal_states"].to(final_states.dtype)
                    if "dfinal_states" in x else torch.zeros_like(final_states)]
        torch.autograd.backward(grads_out, grads_in)
        return {"out": out.detach(), "final_states": final_states.detach(), **leaf_grads(leaves, GRADS)}
    return fn


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--mamba-ssm", default=os.environ.get("MAMBA_SSM_SRC"),
                    help="source tree holding mamba_ssm/ (default: the installed package)")
    ap.add_argument("--out", default=os.path.join("build", "check", "mamba_ssd_backward"))
    args = ap.parse_args(argv)
    os.chdir(REPO)
    import assay  # PYTHONPATH=python
    from _claims import announce_claims, claimed_cases, print_case_verdicts, timed_check

    if not torch.cuda.is_available():
        print("no CUDA device: mamba_ssm's Triton kernels need a GPU", file=sys.stderr)
        return 125
    kernel = load_mamba_chunk_scan_combined(args.mamba_ssm)
    claimed, skipped = claimed_cases(assay, OP, supports)
    if not announce_claims(f"mamba_ssm mamba_chunk_scan_combined fwd+bwd (torch {torch.__version__})",
                           OP, claimed, skipped):
        return 2
    report, seconds = timed_check(assay, OP, make_fn(kernel, args.device), claimed, args.out,
                                  os.path.join("golden", OP, claimed[0] + ".h5"),
                                  sync=torch.cuda.synchronize, name="mamba_ssm_ssd")
    print(f"assay.check over {len(claimed)} claimed cases: {seconds:.3f} s")
    return 1 if print_case_verdicts(report, claimed) else 0


if __name__ == "__main__":
    sys.exit(main())
