"""mamba_ssm's Mamba-3 kernels against the mamba3 goldens.

The goldens' inputs carry the kernels' argument names and layouts, so both calls pass them as they
are (states as the (Angle, SSM, K, V) tuple SISO takes) and rename nothing but the outputs.

  mamba_ssm.mamba3_siso_combined  (Triton, ops/triton/mamba3/mamba3_siso_combined.py), profile
      bf16-angles: angle_dt_fwd stores the fp32 angle cumsum in the Angles dtype, which
      mamba3_siso_combined has cast to bf16, per token and as the final angle state, and the
      rotations (of q, and of k before it enters the state) read those bf16 angles. Forward with
      return_final_states=True; backward goldens through its autograd (dout and the four
      final-state gradients). It casts Q, K, V, Trap, Angles and Z to bf16 whatever they are, so
      only bf16 cases are claimed; N and P must be powers of two (TMA descriptors) and >= 16 (tl.dot).
  mamba_ssm.mamba3_mimo  (TileLang, ops/tilelang/mamba3/mamba3_mimo.py), profile strict (Angles are
      fp32, so the angle cumsum stays fp32). Unavailable where `tilelang` is not installed. No input
      states, no fused norm (Mamba3 applies RMSNormGated outside the kernel), half-split pairs only;
      final states are non-differentiable upstream, so a backward golden is claimed only without
      final-state gradients.

No other MIMO path exists in the sdist: mamba3_mimo_rotary_step.py is only the decode step's
rotation (apply_rotary_qk_inference_fwd); the state update of a decode step is the CuTe
mamba3_step_fn (ops/cute, needs cutlass-dsl and quack), and mamba3_mimo_utils.py holds dA-cumsum
and backward helpers of the TileLang kernel.
"""
from conformance.upstream import Unavailable, Upstream
from conformance.upstreams.ssd import DIST, load

SISO_ARGS = ["Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "Angles", "D", "Z"]
SISO_STATES = ["Angle_State", "SSM_State", "K_State", "V_State"]
MIMO_ARGS = ["Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "MIMO_V", "MIMO_Z", "MIMO_Out",
             "Angles", "D", "Z"]
FINALS = ["final_angle", "final_ssm", "final_k", "final_v"]


def _pow2(n):
    return n > 0 and n & (n - 1) == 0


def siso_supports(case, golden):
    if case.get("variant") != "siso":
        return False, "MIMO case"
    odd = sorted(f"{n} {d}" for n, d in golden.input_dtypes.items()
                 if n in ("Q", "K", "V", "Trap", "Angles", "Z") and d != "bf16")
    if odd or golden.outputs["out"].dtype != "bf16":
        return False, (f"{', '.join(odd) or 'out ' + golden.outputs['out'].dtype}: mamba3_siso_combined casts "
                       "Q, K, V, Trap, Angles, Z to bf16 ('Typecast all derived tensors to bf16'), so a "
                       "non-bf16 case would judge a bf16 computation at its own dtype's tolerances")
    N, P, S = case["N"], case["P"], case.get("S", case["N"] // 2)
    if not (_pow2(N) and _pow2(P) and N >= 16 and P >= 16):
        return False, (f"N = {N}, P = {P}: needs power-of-two head dims (TMA descriptors) of at least 16 "
                       "(tl.dot operand dims; N = P = 8 fails to compile in mamba3_siso_bwd_kernel_dqkv)")
    if S % 2 or 2 * S > N:
        return False, f"S = {S}: mamba3_siso_fwd asserts headdim_angles even and <= N/2"
    if not _pow2(int(case.get("chunk_size", 64))):
        return False, "chunk_size not a power of two (tl.arange)"
    return True, ""


def mimo_supports(case, golden):
    if case.get("variant") != "mimo":
        return False, "SISO case"
    if case.get("initial_states", False):
        return False, "input states: the TileLang mamba3_mimo takes none"
    if case.get("fused_norm", False):
        return False, "fused pre-gate norm: mamba3_mimo has none (Mamba3 applies RMSNormGated outside the kernel)"
    if case.get("rotate_pairwise", False):
        return False, "adjacent pairs: the TileLang kernel rotates (i, i + N/2) pairs"
    if int(case.get("chunk_size", 8)) < 8:
        return False, "chunk_size < 8 (mamba3_mimo asserts chunk_size >= 8)"
    # mamba3_mimo.py warns "has not been tested" outside these values, notes that (16, 32) and
    # (256, 128) can fail to compile, and that it is "prone to ... Tilelang compilation error" away
    # from the tested combinations: cases outside them are outside the kernel's stated domain.
    N, P, R = int(case["N"]), int(case["P"]), int(case.get("R", 1))
    if N not in (16, 32, 64, 128, 256) or P not in (32, 64, 128) or R not in (1, 2, 4, 8):
        return False, "headdim_qk / headdim_v / mimo_rank outside mamba3_mimo's tested values (N 16-256, P 32/64/128, R 1/2/4/8)"
    if (N, P) in ((16, 32), (256, 128)):
        return False, f"(headdim_qk, headdim_v) = ({N}, {P}): mamba3_mimo notes it can fail to compile"
    if case.get("backward", False) and any(n in golden.inputs for n in ("dfinal_angle", "dfinal_ssm", "dfinal_k", "dfinal_v")):
        return False, "final-state gradients: mamba3_mimo marks its final states non-differentiable"
    return True, ""


def _backward(golden, x, leaves, outs):
    """torch autograd from dout and whichever final-state gradients the golden has (d<output>);
    returns the inputs' gradients under the golden's names (d<input>)."""
    import torch
    pairs = [(t, x["d" + n].to(t.dtype)) for n, t in zip(["out"] + FINALS, outs) if "d" + n in x]
    torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
    return {"d" + n: t.grad for n, t in leaves.items() if "d" + n in golden.outputs}


def siso_make_fn():
    kernel = load("ops.triton.mamba3.mamba3_siso_combined").mamba3_siso_combined
    import torch

    def fn(golden):
        c = golden.case
        x = golden.to_torch(device="cuda")
        backward = bool(c.get("backward", False))
        leaves = {n: x[n].clone().requires_grad_(backward) for n in SISO_ARGS + SISO_STATES if n in x}
        states = tuple(leaves[n] for n in SISO_STATES) if "SSM_State" in leaves else None
        cu = x["cu_seqlens"].to(torch.int32).contiguous() if "cu_seqlens" in x else None
        with torch.set_grad_enabled(backward):
            outs = kernel(*(leaves.get(n) for n in SISO_ARGS), Input_States=states,
                          chunk_size=int(c.get("chunk_size", 64)), return_final_states=True, cu_seqlens=cu)
        res = {"out": outs[0].detach()}
        res.update({n: t.detach().float() if n != "final_v" else t.detach() for n, t in zip(FINALS, outs[1:])})
        if backward:
            res.update(_backward(golden, x, leaves, outs))
        return res
    return fn


def mimo_make_fn():
    try:
        import tilelang  # noqa: F401
    except ImportError as e:
        raise Unavailable(f"tilelang is not installed ({e}): mamba3_mimo is a TileLang kernel") from None
    kernel = load("ops.tilelang.mamba3.mamba3_mimo").mamba3_mimo
    import torch

    def fn(golden):
        c = golden.case
        x = golden.to_torch(device="cuda")
        backward = bool(c.get("backward", False))
        leaves = {n: x[n].clone().requires_grad_(backward) for n in MIMO_ARGS if n in x}
        act = x["V"].dtype
        chunk = int(c.get("chunk_size") or max(8, 64 // int(c.get("R", 1))))
        cu = x["cu_seqlens"].to(torch.int32).contiguous() if "cu_seqlens" in x else None
        with torch.set_grad_enabled(backward):
            outs = kernel(*(leaves.get(n) for n in MIMO_ARGS), chunk_size=chunk,
                          rotary_dim_divisor=int(c.get("rotary_dim_divisor", 4)), dtype=act,
                          return_state=True, cu_seqlens=cu)
        res = {"out": outs[0].detach()}
        res.update({n: t.detach() for n, t in zip(FINALS, outs[1:])})
        if backward:
            res.update(_backward(golden, x, leaves, outs[:1]))
        return res
    return fn


UPSTREAMS = [
    Upstream("mamba_ssm.mamba3_siso_combined", DIST, "mamba3", "bf16-angles",
             "angle_dt.py: `out = torch.empty_like(angle)` and `output_state = torch.empty(..., "
             "dtype=angle.dtype)` after mamba3_siso_combined's `Angles = Angles.to(torch.bfloat16)`: the "
             "angle cumsum the rotations read, and the final angle state, are stored in bf16",
             siso_supports, siso_make_fn,
             what="mamba3_siso_combined(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, "
                  "Input_States=(Angle_State, SSM_State, K_State, V_State), chunk_size, "
                  "return_final_states=True, cu_seqlens); golden tensors as they are; backward "
                  "through its autograd with dout and the dfinal_* gradients"),
    Upstream("mamba_ssm.mamba3_mimo", DIST, "mamba3", "strict",
             "Angles fp32 (angle_dt_fwd keeps the cumsum in the Angles dtype); the kernel computes in "
             "`dtype` (the activation dtype) with fp32 accumulators",
             mimo_supports, mimo_make_fn,
             what="TileLang mamba3_mimo(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, "
                  "MIMO_Out, Angles, D, Z, chunk_size, rotary_dim_divisor, dtype=V.dtype, "
                  "return_state=True, cu_seqlens); golden tensors as they are; backward (dout only) "
                  "through its autograd"),
]
