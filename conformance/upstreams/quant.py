"""torchao 0.18 quantizers against the `quant` goldens.

- ``torchao.to_mx[floor]`` / ``torchao.to_mx[rceil]``: ``MXTensor.to_mx`` (the eager ``to_mx`` path,
  ``ScaleCalculationMode.FLOOR`` / ``RCEIL``), block 32, elements float8_e4m3fn, float8_e5m2 or
  float4_e2m1fn_x2; ``xhat_*`` is ``MXTensor.dequantize(torch.float32)``. The golden rules are floor
  and RCEIL only, so CEIL and EVEN have no upstream here (no golden to claim).
- ``torchao.to_blocked``: ``mx_formats.utils.to_blocked``, the 128x4 scale swizzle that
  ``is_swizzled_scales=True`` applies, on the ``swizzle`` recipe's ``sf``.
- ``torchao.to_nvfp4``: ``NVFP4Tensor.to_nvfp4`` with block 16 and the per-tensor scale torchao's
  own workflow computes (``per_tensor_amax_to_scale(torch.max(torch.abs(x)))``, or of the case's
  amax override, as its static-calibration path does); single level without it. ``xhat_row`` is
  ``NVFP4Tensor.dequantize(torch.float32)``.

Only layout is mapped, never values: a columnwise output is torchao's rowwise cast of ``x.t()`` (the
golden stores columnwise as the quantization of x^T, ``[N, M]``); a ragged last block (torchao
asserts ``K % block == 0``) is zero-padded on the input, which leaves every block amax as it is, and
the padding's outputs are cut off; fp4 codes are torchao's own ``unpack_uint4`` of its packed bytes,
whose nibble order (element 2k in the low nibble of byte k, ``pack_uint4``) is the golden's.
Not expressible (supports says why): TE's NVFP4 arithmetic, RHT, stochastic rounding and 16x16
tiles, the FP8 per-tensor / per-channel / DeepSeek casts, fake-quant and the block-scaled GEMMs.
Profile ``strict``: every quant output is an exact code or a dequantized value of exact codes.
"""
import os

from conformance.upstream import Unavailable, Upstream

WHY_MX = ("to_mx: data_lp = clamp(data_hp.float() / scale_fp32 (RCEIL: * rcp_fp32)).to(elem_dtype), "
          "one fp32 op then the code rounding; to_dtype: code * 2^e in fp32")
WHY_NVFP4 = ("nvfp4_quantize: data_hp.float() * reciprocal_scale in fp32, then f32_to_f4_unpacked; "
             "dequantize: code * (per_tensor_scale * scale_e4m3) in fp32")
MX_ELEMS = {"e4m3": ("float8_e4m3fn", "fp8e4m3"), "e5m2": ("float8_e5m2", "fp8e5m2"),
            "e2m1": ("float4_e2m1fn_x2", "fp4e2m1")}


def _device() -> str:
    return os.environ.get("CONFORMANCE_DEVICE", "cuda")


def _dirs(case: dict) -> list:
    return [d for d, on in (("row", case.get("rowwise", True)), ("col", case.get("columnwise", False))) if on]


def _check_outputs(golden, case: dict, code_dtype: str, scale_dtype: str, packed: bool, amax: bool = False):
    """(True, "") when the golden's outputs (names and dtypes) are exactly the ones this mapping makes."""
    want = {}
    for d in _dirs(case):
        want.update({f"q_{d}": code_dtype, f"scale_{d}": scale_dtype, f"xhat_{d}": "fp32"})
        want.update({f"packed_{d}": "uint8"} if packed else {})
        want.update({f"amax_{d}": "fp32"} if amax else {})
    got = {n: o.dtype for n, o in golden.outputs.items()}
    if got != want:
        return False, f"outputs {sorted(got.items())} are not this mapping's {sorted(want.items())}"
    return True, ""


def _supports_mx(rule: str):
    def supports(case: dict, golden):
        if case.get("recipe") != "mx":
            return False, f"recipe {case.get('recipe')!r}: torchao.to_mx is the MX cast"
        if case.get("rule", "floor") != rule:
            return False, f"scale rule {case.get('rule', 'floor')!r}, this upstream is ScaleCalculationMode.{rule.upper()}"
        elem = case.get("elem", "e4m3")
        if elem not in MX_ELEMS:
            return False, f"element {elem!r}: not an MX element dtype of torchao here"
        if golden.input_dtypes.get("x") not in ("bf16", "fp32"):
            return False, "to_mx takes a bf16 or fp32 x"
        return _check_outputs(golden, case, MX_ELEMS[elem][1], "ue8m0", elem == "e2m1")
    return supports


def _supports_nvfp4(case: dict, golden):
    if case.get("recipe", "nvfp4") != "nvfp4":
        return False, f"recipe {case.get('recipe')!r}: torchao.to_nvfp4 is the NVFP4 cast"
    if not case.get("ao", False):
        return False, "TransformerEngine's NVFP4 arithmetic (S_enc, folded 1/6), not torchao's recipe"
    for f, what in (("block_2d", "16x16 tiles"), ("rht", "the random Hadamard transform"), ("sr", "stochastic rounding")):
        if case.get(f, False):
            return False, f"{what}: TransformerEngine only, torchao's to_nvfp4 has no such option"
    # The golden models `tensor / python scalar` as CUDA computes it (x * fl(1/b)) or as a true
    # division (CPU): claim it only on the device whose arithmetic it records.
    if bool(case.get("ao_cuda_div", True)) != _device().startswith("cuda"):
        return False, f"ao_cuda_div={case.get('ao_cuda_div', True)} records another device's scalar division than {_device()}"
    if golden.input_dtypes.get("x") not in ("bf16", "fp32"):
        return False, "to_nvfp4 takes a bf16 or fp32 x"
    return _check_outputs(golden, case, "fp4e2m1", "fp8e4m3", True, amax=True)


def _supports_swizzle(case: dict, golden):
    if case.get("recipe") != "swizzle":
        return False, f"recipe {case.get('recipe')!r}: to_blocked is the scale swizzle"
    if golden.input_dtypes.get("sf") != "uint8" or {n: o.dtype for n, o in golden.outputs.items()} != {"sf_swizzled": "uint8"}:
        return False, "to_blocked maps sf [R, C] u8 to sf_swizzled [S] u8; this golden has other tensors"
    return True, ""


def _padded(x, block: int):
    """x [R, C] zero-padded along C to a multiple of `block` (torchao asserts C % block == 0; zeros
    change no block amax). Layout only: the caller crops the outputs back to C."""
    import torch.nn.functional as F

    pad = -x.shape[1] % block
    return (F.pad(x, (0, pad)) if pad else x).contiguous()


def _torch_modules():
    try:
        import torch
        import torchao  # noqa: F401
    except ImportError as e:
        raise Unavailable(f"torch / torchao not importable: {e}") from None
    if _device().startswith("cuda") and not torch.cuda.is_available():
        raise Unavailable("CONFORMANCE_DEVICE is cuda but torch sees no GPU")
    return torch


def _make_mx(rule: str):
    def make_fn():
        torch = _torch_modules()
        from assay.candidate import codes
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.kernels import unpack_uint4
        from torchao.prototype.mx_formats.mx_tensor import MXTensor

        mode = ScaleCalculationMode(rule)
        supports = _supports_mx(rule)

        def fn(golden):
            elem = golden.case.get("elem", "e4m3")
            elem_dtype = getattr(torch, MX_ELEMS[elem][0])
            x = golden.to_torch(_device(), ["x"])["x"]
            out = {}
            for d in _dirs(golden.case):
                hp = x if d == "row" else x.t()  # columnwise = torchao's rowwise cast of x^T ([N, M])
                cols = hp.shape[1]
                t = MXTensor.to_mx(_padded(hp, 32), elem_dtype, 32, scaling_mode=mode)
                out[f"scale_{d}"] = t.scale[:, : -(-cols // 32)]  # float8_e8m0fnu, padding blocks cut
                out[f"xhat_{d}"] = t.dequantize(torch.float32)[:, :cols]
                if elem == "e2m1":  # qdata: torchao's packed bytes, element 2k in the low nibble (= golden's)
                    out[f"packed_{d}"] = t.qdata[:, : -(-cols // 2)]
                    out[f"q_{d}"] = codes(unpack_uint4(t.qdata.contiguous())[:, :cols], "fp4e2m1")
                else:
                    out[f"q_{d}"] = t.qdata[:, :cols]
            return out

        return fn
    return make_fn


def _make_nvfp4():
    torch = _torch_modules()
    from assay.candidate import codes
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    def fn(golden):
        c = golden.case
        x = golden.to_torch(_device(), ["x"])["x"]
        out = {}
        for d in _dirs(c):
            hp = x if d == "row" else x.t()  # columnwise = the rowwise cast of x^T ([N, M])
            cols = hp.shape[1]
            # torchao's workflow: tensor_amax = torch.max(torch.abs(w)) (inference_workflow.py), or a
            # calibrated amax (the case's override) as its static path passes it.
            if f"amax_{d}" in c:
                amax = torch.tensor(float(c[f"amax_{d}"]), dtype=torch.float32, device=x.device)
            else:
                amax = torch.max(torch.abs(hp))
            pts = per_tensor_amax_to_scale(amax) if c.get("ao_two_level", True) else None
            t = NVFP4Tensor.to_nvfp4(_padded(hp, 16), block_size=16, per_tensor_scale=pts)
            out[f"amax_{d}"] = amax.float().reshape(1)
            out[f"scale_{d}"] = t.scale[:, : -(-cols // 16)]  # float8_e4m3fn, padding blocks cut
            out[f"xhat_{d}"] = t.dequantize(torch.float32)[:, :cols]
            out[f"packed_{d}"] = t.qdata[:, : -(-cols // 2)]  # element 2k in the low nibble (= golden's)
            out[f"q_{d}"] = codes(unpack_uint4(t.qdata.contiguous())[:, :cols], "fp4e2m1")
        return out

    return fn


def _make_swizzle():
    _torch_modules()
    from torchao.prototype.mx_formats.utils import to_blocked

    def fn(golden):
        return {"sf_swizzled": to_blocked(golden.to_torch(_device(), ["sf"])["sf"])}  # already flat [S]

    return fn


UPSTREAMS = [
    Upstream(
        name=f"torchao.to_mx[{rule}]", dist="torchao", op="quant", profile="strict",
        profile_why=WHY_MX, supports=_supports_mx(rule), make_fn=_make_mx(rule),
        what=f"MXTensor.to_mx(x, elem, 32, ScaleCalculationMode.{rule.upper()}) rowwise, and of x.t() "
             "for the columnwise outputs; ragged blocks zero-padded; xhat = dequantize(float32)",
    )
    for rule in ("floor", "rceil")
] + [
    Upstream(
        name="torchao.to_nvfp4", dist="torchao", op="quant", profile="strict", profile_why=WHY_NVFP4,
        supports=_supports_nvfp4, make_fn=_make_nvfp4,
        what="NVFP4Tensor.to_nvfp4(x, 16, per_tensor_amax_to_scale(torch.max(torch.abs(x)))); "
             "amax_row = that amax; xhat = dequantize(float32)",
    ),
    Upstream(
        name="torchao.to_blocked", dist="torchao", op="quant", profile="strict",
        profile_why="a byte permutation with zero padding: exact", supports=_supports_swizzle,
        make_fn=_make_swizzle,
        what="mx_formats.utils.to_blocked(sf): the 128x4 scale-factor swizzle (cuBLAS block-scaling layout)",
    ),
]
