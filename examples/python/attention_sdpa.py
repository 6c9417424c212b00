#!/usr/bin/env python3
"""torch's scaled_dot_product_attention checked against assay's attention goldens.

    PYTHONPATH=python python3 examples/python/attention_sdpa.py                # on a GPU machine
    PYTHONPATH=python python3 examples/python/attention_sdpa.py --device cpu   # torch's CPU SDPA

The kernel under test is `torch.nn.functional.scaled_dot_product_attention` run in the golden's
input dtype (bf16 / fp16), as a model would call it. It is checked under the strict precision
profile (docs/ops/attention.md: fp32 scores, P rounded to the 16-bit input dtype at worst, O
rounded on store). What it claims is decided per golden from `golden.case`:

  claimed      dense (B, Sq / Sk, Hq / Hkv, D / Dv) layouts; GQA / MQA (query head h reads KV head
               h / (Hq / Hkv): repeat_interleave, never h % Hkv); any `scale` (default 1/sqrt(D));
               causal, which assay aligns BOTTOM-RIGHT (row i sees key j iff j <= i + Sk - Sq)
               while SDPA's is_causal is top-left: unless Sq == Sk an explicit boolean mask is
               passed; inclusive windows (same mask); Dv != D; any num_splits / tile sizes (they
               only shape the golden's intermediates, not O / LSE).
  not claimed  softcap, learnable sinks, varlen (seqlens_q / seqlens_k), paged KV, backward and
               lse_grad cases, fp8 inputs: SDPA cannot express them.

Outputs, under the golden's names and axes:
  O    [B, Sq, Hq, Dv] in the output dtype: SDPA's result (SDPA works in [B, H, S, D]; transposed
       back). A row that sees no key (causal with Sq > Sk) is set to 0 as assay's convention says
       (SDPA returns NaN there).
  LSE  [B, Hq, Sq] fp32, natural log: SDPA does not return it, so it is computed in torch from the
       same fp32 scores scale * q k^T under the same mask (what a flash kernel's softmax_lse holds);
       -inf on a row with no visible key.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)  # _claims.py
OP = "attention"
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def supports(case, golden=None):
    """(True, "") if SDPA can compute this golden honestly, else (False, why). Decided from golden.case."""
    if case.get("backward", False) or case.get("lse_grad", False):
        return False, "backward (SDPA forward only here)"
    if float(case.get("softcap", 0.0)) != 0.0:
        return False, "softcap"
    if case.get("sink", False):
        return False, "learnable sink"
    if int(case.get("page_size", 0)) > 0:
        return False, "paged KV"
    if case.get("seqlens_q") or case.get("seqlens_k"):
        return False, "varlen"
    if case["Hq"] % case["Hkv"] != 0:
        return False, "Hq % Hkv != 0"
    if golden is not None:
        if set(golden.outputs) != {"O", "LSE"}:
            return False, f"outputs {sorted(golden.outputs)}"
        for name in ("q", "k", "v"):
            if str(golden.inputs[name].dtype) not in ("bfloat16", "float16"):
                return False, f"{name} stored as {golden.inputs[name].dtype}: only bf16 / fp16 inputs (no fp8)"
        if golden.outputs["O"].dtype not in ("bf16", "fp16") or golden.outputs["LSE"].dtype != "fp32":
            return False, "output dtypes"
        if golden.axes["q"] != ("B", "Sq", "Hq", "D") or golden.axes["O"] != ("B", "Sq", "Hq", "Dv"):
            return False, f"layout {golden.axes['q']} -> {golden.axes['O']}"
    return True, ""


def visible_mask(case, Sq, Sk, device):
    """assay's visibility rule (docs/ops/attention.md): bottom-right causal, inclusive window; None = all visible."""
    left, right = (list(case.get("window", [-1, -1])) + [-1, -1])[:2]
    if case.get("causal", False):
        right = 0
    if left < 0 and right < 0:
        return None
    i = torch.arange(Sq, device=device)[:, None]
    j = torch.arange(Sk, device=device)[None, :]
    diag = i + (Sk - Sq)
    m = torch.ones(Sq, Sk, dtype=torch.bool, device=device)
    if left >= 0:
        m &= j >= diag - left
    if right >= 0:
        m &= j <= diag + right
    return m


def attention_sdpa(x, case, o_dtype):
    """x: q [B,Sq,Hq,D], k [B,Sk,Hkv,D], v [B,Sk,Hkv,Dv] in bf16 / fp16. Returns O [B,Sq,Hq,Dv], LSE [B,Hq,Sq]."""
    q, k, v = x["q"], x["k"], x["v"]
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = float(case["scale"]) if "scale" in case else 1.0 / math.sqrt(D)
    group = Hq // Hkv
    qt = q.transpose(1, 2)                                           # [B, Hq, Sq, D]
    kt = k.transpose(1, 2).repeat_interleave(group, dim=1)           # [B, Hq, Sk, D]: head h reads h / group
    vt = v.transpose(1, 2).repeat_interleave(group, dim=1)           # [B, Hq, Sk, Dv]

    mask = visible_mask(case, Sq, Sk, q.device)
    if mask is not None and bool(mask.all()):
        mask = None
    sdpa_kw = {"attn_mask": mask}
    if mask is not None and case.get("causal", False) and Sq == Sk and list(case.get("window", [-1, -1])) == [-1, -1]:
        sdpa_kw = {"is_causal": True}                                # top-left == bottom-right when Sq == Sk
    o = F.scaled_dot_product_attention(qt, kt, vt, scale=scale, **sdpa_kw)   # [B, Hq, Sq, Dv], input dtype

    # LSE from fp32 scores (no TF32), same mask; logsumexp of an all -inf row is -inf
    tf32 = None
    if q.is_cuda:
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
    try:
        s = torch.matmul(qt.float(), kt.float().transpose(-1, -2)) * scale   # [B, Hq, Sq, Sk]
    finally:
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                                  # [B, Hq, Sq]

    if mask is not None:
        seen = mask.any(dim=-1)                                       # [Sq]: rows with a visible key
        o = torch.where(seen[None, None, :, None], o, torch.zeros((), dtype=o.dtype, device=o.device))
    return o.transpose(1, 2).contiguous().to(o_dtype), lse.contiguous()


def make_fn(device="cuda"):
    """fn(golden) -> {"O", "LSE"} for assay.check; raises NotImplementedError on a case it does not claim."""
    def fn(golden):
        ok, why = supports(golden.case, golden)
        if not ok:
            raise NotImplementedError(f"{golden.case_name}: {why}")
        x = golden.to_torch(device=device)
        o, lse = attention_sdpa(x, golden.case, TORCH_DTYPE[golden.outputs["O"].dtype])
        return {"O": o, "LSE": lse}
    return fn


# for `python -m assay check --op attention --impl attention_sdpa:fn` (PYTHONPATH=python:examples/python;
# ASSAY_EXAMPLE_DEVICE=cpu to run it without a GPU)
_DEVICE = os.environ.get("ASSAY_EXAMPLE_DEVICE", "cuda")
fn = make_fn(_DEVICE)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="torch device (default cuda)")
    ap.add_argument("--out", default=os.path.join("build", "check", "attention_sdpa"), help="report directory")
    args = ap.parse_args(argv)
    os.chdir(REPO)
    import assay  # PYTHONPATH=python
    from _claims import announce_claims, claimed_cases, tensor_findings, timed_check

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: run on a GPU machine, or pass --device cpu", file=sys.stderr)
        return 125
    claimed, skipped = claimed_cases(assay, OP, supports)
    if not announce_claims(f"attention_sdpa (torch {torch.__version__}, {args.device})", OP, claimed, skipped):
        return 2

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    report, seconds = timed_check(assay, OP, make_fn(args.device), claimed, args.out,
                                  os.path.join("golden", OP, claimed[0] + ".h5"), sync=sync,
                                  name="torch_sdpa")
    print(f"assay.check over {len(claimed)} claimed cases: {seconds:.3f} s (after one untimed warm-up call)")

    verdicts = {c["case"]: c for c in report.json["cases"]}
    bad = []
    for n in claimed:
        c = verdicts.get(n)
        if c is None or c["verdict"] != "Passed":
            bad.append(n)
            print(f"FAIL: {n}: {'no verdict' if c is None else c['verdict'] + ' ' + c.get('reason', '')}")
            for name, verdict, first, worst, ratio in tensor_findings(c or {}):
                print(f"      {name}: {verdict}, first bad {first}, worst {worst}, error/allowed {ratio:.3g}")
    if bad:
        return 1
    print(f"OK: all {len(claimed)} claimed {OP} cases Passed (profile strict)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
