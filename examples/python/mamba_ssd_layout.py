#!/usr/bin/env python3
"""mamba_ssm's Triton SSD forward under the layout relation: the inputs as strided views of wide parents.

    PYTHONPATH=python python3 examples/python/mamba_ssd_layout.py [--mamba-ssm DIR] [--case GLOB] [--large]
        [--layout-offset N] [--out DIR]

The kernel under test is upstream's `mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined`,
called forward only, as a model calls it, with the tensors exactly as `g.to_torch("cuda")` hands them
(no .contiguous(), no clone): in the layout relation (assay.relations, python/README.md "Relations
that need no oracle") every input whose axes start with (B, T) (x, dt, B, C, z, seq_idx) is a column
slice of a parent [B, T, W] of its dtype, the way Mamba2 splits its in_proj output, with W so large
that every row from 7/8 of the sequence on starts past 2^31 elements while the tensors stay small.
mamba_ssm's `_chunk_cumsum_fwd` computed `pid_c * chunk_size * stride_dt_seqlen` in 32 bits and read
dt out of bounds for such a view (seqlen 115,866, 128 heads, parent width 18,560).

Two runs:
  1. every forward bf16 / fp16 L0 ssd golden, relations ["layout"], layout_offset 2^31: small
     tensors, offsets past 2^31 (parents of 8 GiB (fp32 dt) and 4 GiB (bf16) on the GPU).
  2. with --large: the L2 golden at the shape of the upstream report (`l2_layout_t115866_h128`,
     generated first with `build/bin/assay gen --op ssd --level L2 --case l2_layout_t115866_h128`,
     a few minutes and a few GB), relations ["layout"].

What to expect: each case's own row Passed (its contiguous inputs; the conformance run shows the
same), and each `<case>@layout` row Passed if upstream computes the offsets in 64 bits, else
Incorrect (garbage dt read through a wrapped offset) or Failed (an illegal address: the CUDA context
is then lost, and the rows after it fail too; run one case per process with --case to see each).
Exit code: 0 when every row is Passed or NotSupported, else 1; the verdict table says which.

Seen (H200, mamba_ssm 2.3.2.post1): every `@layout` row of a case with more than one chunk Failed
(illegal memory access) at --layout-offset 2^31, L0 and --large alike, and Passed bitwise at 2^30
and 0: the 32-bit chunk offset (docs/ops/ssd.md, "The layout relation on upstream").
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import assay  # noqa: E402


def make_fn(kernel):
    import torch

    def fn(g):
        c = g.case
        if c.get("backward", False):
            raise assay.NotSupported("backward case: this example checks the forward")
        if g.input_dtypes.get("x") not in ("bf16", "fp16"):
            raise assay.NotSupported("fp32 activations: run under tf32 in the conformance run instead")
        x = g.to_torch("cuda")  # in the layout relation: strided views of the parents, handed as they are
        dt_max = c.get("dt_max")
        dt_limit = (float(c.get("dt_min") or 0.0), float("inf") if dt_max is None else float(dt_max))
        varlen = "varlen_states" in g.outputs
        res = kernel(x["x"], x["dt"], x["A"], x["B"], x["C"], int(c.get("chunk_size", 64)), D=x.get("D"), z=x.get("z"),
                     dt_bias=x.get("dt_bias"), initial_states=x.get("initial_states"), seq_idx=x.get("seq_idx"),
                     cu_seqlens=x["cu_seqlens"] if varlen else None, dt_softplus=bool(c.get("dt_softplus", True)),
                     dt_limit=dt_limit, return_final_states=True, return_varlen_states=varlen)
        torch.cuda.synchronize()
        out = {"out": res[0], "final_states": res[1]}
        if varlen:
            out["varlen_states"] = res[2]
        return out

    return fn


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mamba-ssm", default=None, help="the folder holding mamba_ssm/ (default: the installed package)")
    ap.add_argument("--large", action="store_true", help="also the L2 golden l2_layout_t115866_h128")
    ap.add_argument("--case", action="append", default=None, help="only these L0 cases (glob, repeatable)")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "check", "mamba_ssd_layout"))
    ap.add_argument("--layout-offset", type=int, default=1 << 31,
                    help="elements past which the last eighth of the rows start (default 2^31; 2^30 or 0 as controls)")
    a = ap.parse_args()
    from mamba_ssd_backward import load_mamba_chunk_scan_combined

    fn = make_fn(load_mamba_chunk_scan_combined(a.mamba_ssm))
    ok = True
    rep = assay.check("ssd", fn, cases=a.case or "*", out=os.path.join(a.out, "L0"), relations=["layout"],
                      layout_offset=a.layout_offset, name="mamba_ssm.mamba_chunk_scan_combined")
    ok = ok and all(v in ("Passed", "NotSupported") for _, v, _ in rep.rows)
    if a.large:
        rep = assay.check("ssd", fn, cases="l2_layout_t115866_h128", level="L2", out=os.path.join(a.out, "L2"),
                          relations=["layout"], layout_offset=a.layout_offset, name="mamba_ssm.mamba_chunk_scan_combined")
        ok = ok and all(v in ("Passed", "NotSupported") for _, v, _ in rep.rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
