#!/usr/bin/env python3
"""A fused recurrent gated delta rule forward in Triton, checked against assay's gated_delta goldens.

    PYTHONPATH=python python3 examples/python/triton_gated_delta.py            # the kernel: every claimed case must pass
    PYTHONPATH=python python3 examples/python/triton_gated_delta.py --broken   # planted bug: every claimed case must be rejected
    TRITON_INTERPRET=1 PYTHONPATH=python python3 examples/python/triton_gated_delta.py --device cpu   # no GPU: Triton's interpreter

The kernel follows the conventions of reference/gated_delta/gated_delta.h (fla @ bc3b101d,
`fused_recurrent_gated_delta_rule`), per (sequence, value head hv, block of V columns), with the
state S[K, BV] kept in fp32 registers for the whole sequence:

    q/k head      h = hv / (HV / H)                      (GVA: contiguous blocks, never hv % H)
    l2norm        x / sqrt(sum x^2 + 1e-6)               (qk_l2norm: eps inside the square root)
    gate          g_t = g (log space, "log") | 0 ("none") | -exp(A_log[hv]) softplus(a + dt_bias[hv]) ("in_kernel", torch softplus, threshold 20)
    beta          beta | sigmoid(beta) | 2 sigmoid(beta) (beta_mode given / sigmoid / two_sigmoid)
    step          S <- exp(g_t) S ; delta = beta_t (v_t - S^T k_t) ; S <- S + k_t delta^T ; o_t = scale S^T q_t
    scale         case field `scale`, default K^-1/2, multiplies q after the l2norm
    state         initial_state / final_state [Nseq, HV, K, V], or [Nseq, HV, V, K] with state_layout = "vk"; fp32
    varlen        cu_seqlens (B = 1): one sequence per [cu[n], cu[n+1]), an empty sequence passes its initial state through
    decode        mode = "decode" is the same recurrence chained over T steps per sequence

Every intermediate stays fp32 and only `o` is rounded to its storage dtype: precision profile
`strict` (docs/ops/gated_delta.md, "Precision profiles").

`--broken` plants one defect: the state is NOT multiplied by exp(g_t) (the gate decay is dropped).
That run claims only the cases where a gate exists (gate != "none": with g == 0 the defect is no
defect) and exits 0 only if assay rejects every one of them, printing where it found the error.
"""
import argparse
import os
import sys

import torch
import triton
import triton.language as tl

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)  # _claims.py
OP = "gated_delta"

GATE = {"none": 0, "log": 1, "in_kernel": 2}
BETA = {"given": 0, "sigmoid": 1, "two_sigmoid": 2}
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@triton.jit
def _gated_delta_fwd_kernel(
    q, k, v, g, beta, A_log, dt_bias, h0, cu_seqlens, o, ht, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    GATE_MODE: tl.constexpr,      # 0 none, 1 log-space g, 2 in-kernel -exp(A_log) softplus(a + dt_bias)
    BETA_MODE: tl.constexpr,      # 0 given, 1 sigmoid, 2 two_sigmoid
    L2NORM: tl.constexpr, STATE_VK: tl.constexpr, HAS_H0: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    DROP_DECAY: tl.constexpr,     # the planted bug of --broken: S is not multiplied by exp(g_t)
):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    # element (k, v) of this sequence's / head's state, in the golden's layout
    if STATE_VK:
        p_state = (i_n * HV + i_hv).to(tl.int64) * K * V + o_v[None, :] * K + o_k[:, None]
    else:
        p_state = (i_n * HV + i_hv).to(tl.int64) * K * V + o_k[:, None] * V + o_v[None, :]

    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_H0:
        b_h += tl.load(h0 + p_state, mask=m_h, other=0.0).to(tl.float32)

    if GATE_MODE == 2:
        b_A = -tl.exp(tl.load(A_log + i_hv).to(tl.float32))
        if HAS_DT_BIAS:
            b_dtb = tl.load(dt_bias + i_hv).to(tl.float32)
        else:
            b_dtb = 0.0

    for t in range(bos, eos):
        p_qk = (t * H + i_h) * K + o_k
        b_q = tl.load(q + p_qk, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k + p_qk, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + (t * HV + i_hv) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        if L2NORM:
            b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
            b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
        b_q = b_q * scale

        b_b = tl.load(beta + t * HV + i_hv).to(tl.float32)
        if BETA_MODE == 1:
            b_b = 1.0 / (1.0 + tl.exp(-b_b))
        elif BETA_MODE == 2:
            b_b = 2.0 / (1.0 + tl.exp(-b_b))

        if GATE_MODE != 0:
            b_g = tl.load(g + t * HV + i_hv).to(tl.float32)
            if GATE_MODE == 2:
                x = b_g + b_dtb
                # torch F.softplus: log1p(exp(x)), x itself above 20; exp(x) where log(1 + exp(x)) would round to 0
                sp = tl.where(x > 20.0, x, tl.where(x < -15.0, tl.exp(x), tl.log(1.0 + tl.exp(x))))
                b_g = b_A * sp
            if not DROP_DECAY:
                b_h = b_h * tl.exp(b_g)          # decay FIRST (exp(-inf) = 0: a clean reset)

        b_kv = tl.sum(b_h * b_k[:, None], axis=0)            # S^T k, [BV]
        b_delta = (b_v - b_kv) * b_b
        b_h = b_h + b_k[:, None] * b_delta[None, :]
        b_o = tl.sum(b_h * b_q[:, None], axis=0)             # scale S^T q, [BV]
        tl.store(o + (t * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)

    tl.store(ht + p_state, b_h, mask=m_h)


def supports(case, golden=None):
    """(True, "") if this kernel implements the case, else (False, why). Decided from golden.case."""
    if case.get("gate", "log") not in GATE:
        return False, f"gate {case.get('gate')!r}"
    if case.get("beta_mode", "given") not in BETA:
        return False, f"beta_mode {case.get('beta_mode')!r}"
    if case.get("state_layout", "kv") not in ("kv", "vk"):
        return False, f"state_layout {case.get('state_layout')!r}"
    if case.get("mode", "prefill") not in ("prefill", "decode"):
        return False, f"mode {case.get('mode')!r}"
    if case["HV"] % case["H"] != 0:
        return False, "HV % H != 0"
    if case["K"] > 256:
        return False, "K > 256 (the state column block lives in registers)"
    if golden is not None:
        if set(golden.outputs) - {"o", "final_state"}:
            return False, f"outputs {sorted(golden.outputs)}"
        for name in ("q", "k", "v"):
            dt = golden.inputs[name].dtype
            if str(dt) not in ("bfloat16", "float16", "float32"):
                return False, f"{name} dtype {dt}"
        if golden.outputs["o"].dtype not in TORCH_DTYPE or golden.outputs["final_state"].dtype != "fp32":
            return False, "output dtypes"
    return True, ""


def supports_broken(case, golden=None):
    ok, why = supports(case, golden)
    if ok and case.get("gate", "log") == "none":
        return False, "gate none: dropping the decay changes nothing"
    return ok, why


def gated_delta_fwd(x, case, o_dtype, drop_decay=False):
    """x: the golden's inputs as torch tensors on one device; case: golden.case. Returns o, final_state."""
    q, k, v = x["q"].contiguous(), x["k"].contiguous(), x["v"].contiguous()
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    dev = q.device
    cu = case.get("cu_seqlens") or []
    if len(cu):
        cu_seqlens = torch.as_tensor(cu, dtype=torch.int64, device=dev)
    else:
        cu_seqlens = torch.arange(0, B * T + 1, T, dtype=torch.int64, device=dev)
    N = cu_seqlens.numel() - 1
    vk = case.get("state_layout", "kv") == "vk"
    gate = GATE[case.get("gate", "log")]
    scale = float(case["scale"]) if "scale" in case else K ** -0.5

    h0 = x.get("initial_state")
    state_shape = (N, HV, V, K) if vk else (N, HV, K, V)
    if h0 is not None:
        assert tuple(h0.shape) == state_shape, (tuple(h0.shape), state_shape)
    o = torch.empty((B, T, HV, V), dtype=o_dtype, device=dev)
    ht = torch.empty(state_shape, dtype=torch.float32, device=dev)
    dummy = torch.zeros(1, dtype=torch.float32, device=dev)
    BK = triton.next_power_of_2(K)
    BV = min(triton.next_power_of_2(V), 32)
    grid = (triton.cdiv(V, BV), N * HV)
    _gated_delta_fwd_kernel[grid](
        q, k, v.contiguous(),
        x["g"].contiguous() if gate else dummy,
        x["beta"].contiguous(),
        x["A_log"] if gate == 2 else dummy,
        x["dt_bias"] if (gate == 2 and "dt_bias" in x) else dummy,
        h0.contiguous() if h0 is not None else dummy,
        cu_seqlens, o, ht, scale,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV,
        GATE_MODE=gate, BETA_MODE=BETA[case.get("beta_mode", "given")],
        L2NORM=bool(case.get("qk_l2norm", False)), STATE_VK=vk, HAS_H0=h0 is not None,
        HAS_DT_BIAS="dt_bias" in x, DROP_DECAY=drop_decay,
    )
    return o, ht


def make_fn(device="cuda", broken=False):
    """fn(golden) -> {"o", "final_state"} for assay.check; raises NotImplementedError on a case it does not claim."""
    accept = supports_broken if broken else supports

    def fn(golden):
        ok, why = accept(golden.case, golden)
        if not ok:
            raise NotImplementedError(f"{golden.case_name}: {why}")
        o, ht = gated_delta_fwd(golden.to_torch(device=device), golden.case,
                                TORCH_DTYPE[golden.outputs["o"].dtype], drop_decay=broken)
        return {"o": o, "final_state": ht}
    return fn


# for `python -m assay check --op gated_delta --impl triton_gated_delta:fn` (PYTHONPATH=python:examples/python;
# ASSAY_EXAMPLE_DEVICE=cpu to run it without a GPU)
_DEVICE = os.environ.get("ASSAY_EXAMPLE_DEVICE", "cuda")
fn = make_fn(_DEVICE)
fn_broken = make_fn(_DEVICE, broken=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="torch device (cpu needs TRITON_INTERPRET=1)")
    ap.add_argument("--broken", action="store_true",
                    help="plant the dropped-decay bug; exit 0 only if every claimed case is rejected")
    ap.add_argument("--out", default=None, help="report directory (default build/check/<variant>)")
    args = ap.parse_args(argv)
    os.chdir(REPO)
    import assay  # PYTHONPATH=python
    from _claims import announce_claims, claimed_cases, tensor_findings, timed_check

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: run on a GPU machine, or TRITON_INTERPRET=1 ... --device cpu", file=sys.stderr)
        return 125
    variant = "triton_gated_delta_broken" if args.broken else "triton_gated_delta"
    out = args.out or os.path.join("build", "check", variant)
    claimed, skipped = claimed_cases(assay, OP, supports_broken if args.broken else supports)
    if not announce_claims(f"{variant} (torch {torch.__version__}, triton {triton.__version__}, {args.device})", OP,
                           claimed, skipped):
        return 2

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    report, seconds = timed_check(assay, OP, make_fn(args.device, args.broken), claimed, out,
                                  os.path.join("golden", OP, claimed[0] + ".h5"), sync=sync,
                                  name="triton_gdn_recurrent" + ("_broken_no_gate_decay" if args.broken else ""))
    print(f"assay.check over {len(claimed)} claimed cases: {seconds:.3f} s "
          f"(after one untimed warm-up call of the kernel: Triton compiles there)")

    verdicts = {c["case"]: c for c in report.json["cases"]}
    missing = sorted(set(claimed) - set(verdicts))
    if missing:
        print(f"FAIL: no verdict for claimed cases {missing}")
        return 1

    if not args.broken:
        bad = [n for n in claimed if verdicts[n]["verdict"] != "Passed"]
        for n in bad:
            c = verdicts[n]
            print(f"FAIL: {n}: {c['verdict']} {c.get('reason', '')}")
            for name, verdict, first, worst, ratio in tensor_findings(c):
                print(f"      {name}: {verdict}, first bad {first}, worst {worst}, error/allowed {ratio:.3g}")
        if bad:
            return 1
        print(f"OK: all {len(claimed)} claimed {OP} cases Passed (profile strict)")
        return 0

    # --broken: the planted defect must be rejected on every claimed case, with the place it was found
    print("planted defect: gate decay dropped (S is not multiplied by exp(g_t) before the delta update)")
    escaped = []
    for n in claimed:
        c = verdicts[n]
        if c["verdict"] != "Incorrect":
            escaped.append(n)
            print(f"  NOT REJECTED: {n}: {c['verdict']} {c.get('reason', '')}")
            continue
        for name, verdict, first, worst, ratio in tensor_findings(c):
            print(f"  rejected {n}: {name} {verdict}: first bad {first}, worst {worst}, error/allowed {ratio:.3g}")
    if escaped:
        print(f"FAIL: the dropped decay escaped on {len(escaped)} of {len(claimed)} claimed cases: {escaped}")
        return 1
    print(f"OK: the planted defect (dropped gate decay) was rejected on all {len(claimed)} claimed cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
