# assay.dtypes: the assay dtype names (reference/core/dtype.h) and their numpy / ml_dtypes / torch
# counterparts. Storage codes are reinterpreted bit for bit (`.view`), never converted.
"""Assay dtype names and their numpy, ml_dtypes and torch counterparts.

Every assay dtype has a *storage* numpy dtype, whose values are the kernel-facing numbers
(``ml_dtypes.bfloat16`` for ``bf16``, ``np.float32`` for ``fp32``, ``np.int32`` for ``int32``), and an
unsigned *code* dtype of the same width as stored in a golden (``uint16`` for ``bf16``). ``fp4e2m1``
is stored one code per byte (unpacked), as ``ml_dtypes.float4_e2m1fn`` is.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import AssayError


@dataclass(frozen=True)
class DType:
    """One assay dtype: ``name`` (canonical), ``bits`` (4 for fp4e2m1), ``nbytes`` (storage bytes per
    element), ``is_float``, ``numpy`` (the storage dtype values are viewed as) and ``codes`` (the
    unsigned integer dtype of the same width)."""

    name: str
    bits: int
    nbytes: int
    is_float: bool
    numpy: np.dtype | None  # None: this ml_dtypes is too old to have it (fp4e2m1, ue8m0 need >= 0.5)
    codes: np.dtype
    torch: str  # attribute name in the torch module ("bfloat16"), "" where torch has none


def _d(name, bits, nbytes, is_float, storage, torch_name):
    codes = np.dtype(f"uint{8 * nbytes}")
    if isinstance(storage, str):  # an ml_dtypes type that older ml_dtypes lack: resolved at use
        storage = getattr(ml_dtypes, storage, None)
    return DType(name, bits, nbytes, is_float, np.dtype(storage) if storage is not None else None, codes, torch_name)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        _d("fp64", 64, 8, True, np.float64, "float64"),
        _d("fp32", 32, 4, True, np.float32, "float32"),
        _d("bf16", 16, 2, True, ml_dtypes.bfloat16, "bfloat16"),
        _d("fp16", 16, 2, True, np.float16, "float16"),
        _d("fp8e4m3", 8, 1, True, ml_dtypes.float8_e4m3fn, "float8_e4m3fn"),
        _d("fp8e5m2", 8, 1, True, ml_dtypes.float8_e5m2, "float8_e5m2"),
        _d("fp4e2m1", 4, 1, True, "float4_e2m1fn", ""),  # torch has only the packed x2 type
        _d("ue8m0", 8, 1, True, "float8_e8m0fnu", "float8_e8m0fnu"),
        _d("int8", 8, 1, False, np.int8, "int8"),
        _d("uint8", 8, 1, False, np.uint8, "uint8"),
        _d("int32", 32, 4, False, np.int32, "int32"),
        _d("uint32", 32, 4, False, np.uint32, "uint32"),
        _d("int64", 64, 8, False, np.int64, "int64"),
    )
}

# The aliases parse_dtype (reference/core/dtype.cpp) accepts.
_ALIASES = {
    "f64": "fp64", "float64": "fp64", "double": "fp64",
    "f32": "fp32", "float32": "fp32", "float": "fp32",
    "bfloat16": "bf16",
    "f16": "fp16", "half": "fp16", "float16": "fp16",
    "e4m3": "fp8e4m3", "e4m3fn": "fp8e4m3", "fp8e4m3fn": "fp8e4m3", "float8_e4m3fn": "fp8e4m3",
    "e5m2": "fp8e5m2", "float8_e5m2": "fp8e5m2",
    "e2m1": "fp4e2m1", "fp4": "fp4e2m1", "float4_e2m1fn_x2": "fp4e2m1", "float4_e2m1fn": "fp4e2m1",
    "e8m0": "ue8m0", "float8_e8m0fnu": "ue8m0", "e8m0fnu": "ue8m0",
    "i8": "int8", "u8": "uint8", "i32": "int32", "u32": "uint32", "i64": "int64",
}


def lookup(name: str) -> DType | None:
    """The DType named ``name`` (a canonical name or an alias assay accepts), else None."""
    return DTYPES.get(_ALIASES.get(name, name))


def get(name: str, where: str = "") -> DType:
    """The DType named ``name``; AssayError ``"<where>: unknown dtype '<name>'"`` if there is none."""
    d = lookup(name)
    if d is None:
        raise AssayError(f"{where + ': ' if where else ''}unknown dtype '{name}'")
    return d


def from_numpy(dt: np.dtype) -> DType | None:
    """The assay dtype whose storage dtype is ``dt`` (``ml_dtypes.bfloat16`` -> bf16), else None."""
    dt = np.dtype(dt)
    for d in DTYPES.values():
        if d.numpy is not None and d.numpy == dt:
            return d
    return None


def view_codes(codes: np.ndarray, d: DType) -> np.ndarray:
    """Reinterprets integer storage codes (signed or unsigned, ``d.nbytes`` wide) as ``d``'s storage
    dtype, bit for bit."""
    return np.ascontiguousarray(codes).view(storage(d))


def storage(d: DType) -> np.dtype:
    """``d.numpy``; AssayError when this ml_dtypes lacks it."""
    if d.numpy is None:
        raise AssayError(f"ml_dtypes {ml_dtypes.__version__} has no dtype for {d.name}: pip install 'ml_dtypes>=0.5'")
    return d.numpy


def to_float64(values: np.ndarray) -> np.ndarray:
    """Exact float64 values of a storage-dtype array (every code of these formats is an fp64 value)."""
    with np.errstate(invalid="ignore"):  # NaN codes are values here, not an invalid operation
        return np.asarray(values).astype(np.float64)


def torch_dtype(d: DType):
    """The torch dtype for ``d`` (imports torch). fp4e2m1 has none unpacked: returns torch.uint8."""
    import torch  # lazy: torch is optional

    if not d.torch:
        return torch.uint8
    t = getattr(torch, d.torch, None)
    if t is None:
        raise AssayError(f"this torch ({torch.__version__}) has no torch.{d.torch} for {d.name}")
    return t
