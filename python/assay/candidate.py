# assay.candidate: writes a candidate HDF5 file (a kernel's outputs under the golden's names) that
# `assay compare` reads (verify/judge/candidate.h). Everything is checked before any file is created, and
# the file is written to a temp name and renamed, so a candidate is whole or absent. The path must be
# a regular file or nothing (a directory, symlink, FIFO or device is refused) and never the golden.
"""Write candidate files for ``assay compare``.

>>> g = assay.open("golden/scaled_add/int_exact.h5")
>>> out = my_kernel(**g.to_torch("cuda"))                 # a torch.bfloat16 tensor on the GPU
>>> assay.candidate.write("build/cand/int_exact.h5", g, {"out": out})

Accepted arrays: numpy, torch (any device), jax, cupy, or anything ``np.asarray`` takes. Dtypes:
float64 and float32 as they are, float16 and bfloat16 upcast to float32 (exact), the fp8 / fp4 /
ue8m0 dtype of an output of that format (``ml_dtypes.float8_e4m3fn``, ``torch.float8_e4m3fn``, ...)
written as uint8 codes with a ``dtype`` attribute, integer arrays for integer outputs, and raw
integer codes of the output's format through :func:`codes`.
"""
from __future__ import annotations

import os

import h5py
import numpy as np

from . import _files, dtypes
from .errors import AssayError
from .golden import Golden

__all__ = ["Codes", "codes", "write"]


class Codes:
    """Integer storage codes of an assay dtype: ``codes(array, "fp8e4m3")``. Made by :func:`codes`."""

    def __init__(self, array, dtype: str):
        d = dtypes.lookup(dtype)
        if d is None:
            raise AssayError(f"assay.candidate.codes: unknown dtype '{dtype}'")
        self.array, self.dtype = array, d

    def __repr__(self) -> str:
        return f"Codes({self.dtype.name}, shape={getattr(self.array, 'shape', '?')})"


def codes(array, dtype: str) -> Codes:
    """Marks an integer array as storage codes of ``dtype`` (e.g. uint8 codes of ``"fp8e4m3"``, or
    int16 / uint16 codes of ``"bf16"``: signed or unsigned, only the bit pattern counts). The integer
    width must be the format's storage width; :func:`write` stores them with a ``dtype`` attribute."""
    return Codes(array, dtype)


def _torch_to_numpy(t) -> np.ndarray:
    import torch  # lazy: only reached for a torch tensor

    t = t.detach().cpu()
    if t.dtype.is_complex:
        raise TypeError(f"wrong dtype {t.dtype}")
    if str(t.dtype).startswith("torch.float4"):
        raise TypeError(f"packed {t.dtype} (two codes per byte): unpack it and pass assay.candidate.codes(codes, 'fp4e2m1')")
    name = str(t.dtype).removeprefix("torch.")
    d = dtypes.lookup(name)
    if d is not None and d.is_float and d.name not in ("fp64", "fp32", "fp16"):
        width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[d.nbytes]
        return t.contiguous().view(width).numpy().view(dtypes.storage(d))
    try:
        return t.numpy()
    except TypeError:
        raise TypeError(f"wrong dtype {t.dtype} (no numpy counterpart)") from None


def as_numpy(x) -> np.ndarray:
    """A host numpy array of ``x``: numpy, torch (any device, detached), jax, cupy (``.get()``), or
    anything ``np.asarray`` takes. bf16 / fp8 tensors become ml_dtypes arrays, bit for bit."""
    mod = type(x).__module__ or ""
    if mod.startswith("torch"):
        return _torch_to_numpy(x)
    if mod.startswith("cupy"):
        return np.asarray(x.get())
    return np.asarray(x)


def _refuse_kind(a: np.ndarray):
    """Why an array can carry no numbers (complex, bool, object, strings), else None."""
    if dtypes.from_numpy(a.dtype) is not None:
        return None
    if a.dtype.kind in "fiu" and a.dtype.itemsize <= 8:
        return None
    return f"wrong dtype {a.dtype}"


def _checked_array(a, name: str, shape: tuple, golden_kind: str, where: str) -> np.ndarray:
    """``a`` as a numpy array of the golden's ``shape``; AssayError for what no candidate dataset can
    hold (complex, bool, object, strings) or a wrong shape. ``golden_kind`` names what the golden
    expects, for the message ("output 'y' is bf16")."""
    try:
        arr = as_numpy(a)
    except TypeError as e:
        raise AssayError(f"{where}: {e}") from None
    why = _refuse_kind(arr)
    if why:
        raise AssayError(f"{where}: {why} (golden {golden_kind})")
    if tuple(arr.shape) != shape:
        raise AssayError(f"{where}: wrong shape {tuple(arr.shape)} (golden {name} {shape})")
    return arr


def _prepare_output(a, o, where: str, take=None):
    """(array to store, dtype attribute or None) for golden output ``o``; AssayError when the array
    cannot carry it. ``take``: a sampled golden's offsets (Golden.sample_offsets): only those elements
    are stored, gathered before any conversion."""
    od = dtypes.get(o.dtype, where)
    if isinstance(a, Codes):
        d = a.dtype
        try:
            c = as_numpy(a.array)
        except TypeError as e:
            raise AssayError(f"{where}: {e}") from None
        if c.dtype.kind not in "iu":
            raise AssayError(f"{where}: assay.candidate.codes needs an integer array, got {c.dtype}")
        if tuple(c.shape) != o.shape:
            raise AssayError(f"{where}: wrong shape {tuple(c.shape)} (golden {o.name} {o.shape})")
        if d.name != od.name and d.name not in ("fp32", "fp64"):
            raise AssayError(f"{where}: wrong dtype {d.name} codes (golden output '{o.name}' is {od.name})")
        if c.dtype.itemsize != d.nbytes:
            raise AssayError(f"{where}: {c.dtype.itemsize}-byte integers cannot hold {d.name} codes")
        u = np.ascontiguousarray(c).view(d.codes)
        if take is not None:
            u = u.reshape(-1)[take]
        if d.bits < 8 * d.nbytes and u.size and int(u.max()) >> d.bits:
            i = int(np.argmax((u >> d.bits) != 0))
            raise AssayError(f"{where}: element {i} holds {int(u.reshape(-1)[i]):#x}, not a {d.name} code")
        return u, d.name
    arr = _checked_array(a, o.name, o.shape, f"output '{o.name}' is {od.name}", where)
    if take is not None:
        arr = arr.reshape(-1)[take]
    ad = dtypes.from_numpy(arr.dtype)
    if arr.dtype in (np.float64, np.float32):
        return np.ascontiguousarray(arr), None
    if ad is not None and ad.name in ("fp16", "bf16"):
        return arr.astype(np.float32), None  # exact
    if ad is not None and ad.is_float:  # fp8 / fp4 / ue8m0
        if ad.name != od.name:
            raise AssayError(f"{where}: wrong dtype {arr.dtype} (golden output '{o.name}' is {od.name})")
        return np.ascontiguousarray(arr).view(ad.codes), ad.name
    if arr.dtype.kind in "iu":
        if od.is_float:
            raise AssayError(f"{where}: wrong dtype {arr.dtype} (golden output '{o.name}' is {od.name}; "
                             f"pass raw codes as assay.candidate.codes(array, '{od.name}'))")
        return np.ascontiguousarray(arr), None
    raise AssayError(f"{where}: wrong dtype {arr.dtype} (golden output '{o.name}' is {od.name})")


def _prepare_intermediate(a, name: str, shape: tuple, where: str) -> np.ndarray:
    return _checked_array(a, name, shape, f"intermediate '{name}' is float64", where).astype(np.float64)


def write(path, golden: Golden, outputs: dict, precision_profile: str | None = None,
          intermediates: dict | None = None) -> str:
    """Writes the candidate file ``path`` for ``golden``: ``/outputs/<name>`` for every golden output,
    ``/intermediates/<name>`` (float64) for the given intermediates, and the root attribute
    ``precision_profile`` when given. Returns the path.

    Every output name, shape and dtype is checked first (AssayError, one line naming the candidate
    and the output); nothing is created unless all are right. ``path`` must be a regular file or
    nothing (a directory, symlink, FIFO or device there is refused, not replaced) and not the golden
    itself (also through a link). Parent directories are created, and the file is written to
    ``<path>.tmp.<pid>.<random>`` and renamed into place."""
    path = os.fspath(path)
    gname = f"{golden.op}/{golden.case_name}"
    inputs = _files.Inputs()
    if getattr(golden, "path", None):
        inputs.add(golden.path, f"the golden {golden.path} being judged")
    _files.check_output(path, inputs)
    if not isinstance(outputs, dict):
        raise AssayError(f"{path}: outputs must be a dict name -> array, got {type(outputs).__name__}")
    for n in outputs:
        if n not in golden.outputs:
            raise AssayError(f"{path}: output '{n}' is not an output of golden {gname} "
                             f"(outputs: {', '.join(golden.outputs)})")
    for n in golden.outputs:
        if n not in outputs:
            raise AssayError(f"{path}: output '{n}' of golden {gname} is missing "
                             f"(outputs: {', '.join(golden.outputs)})")
    # A sampled golden (golden/SCHEMA.md "Sampled outputs"): whole outputs in, the sampled elements out.
    takes = {n: golden.sample_offsets(n) if getattr(golden, "sample", None) else None for n in golden.outputs}
    prepared = {n: _prepare_output(outputs[n], golden.outputs[n], f"{path}: output '{n}'", takes[n]) for n in golden.outputs}
    inter = {}
    for n, a in (intermediates or {}).items():
        shapes = getattr(golden, "intermediate_shapes", {})
        if n not in shapes:
            raise AssayError(f"{path}: intermediate '{n}' is not an intermediate of golden {gname} "
                             f"(intermediates: {', '.join(shapes) or 'none'})")
        inter[n] = _prepare_intermediate(a, n, shapes[n], f"{path}: intermediate '{n}'")
    if precision_profile is not None and (not isinstance(precision_profile, str) or not precision_profile):
        raise AssayError(f"{path}: precision_profile must be a non-empty string")

    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise AssayError(f"{path}: cannot create directory {parent} ({e.strerror})") from None
    tmp = None
    try:
        tmp = _files.temp_next_to(path)
        with h5py.File(tmp, "w") as f:
            if precision_profile is not None:
                f.attrs["precision_profile"] = precision_profile
            g = f.create_group("outputs")
            for n, (arr, dt) in prepared.items():
                ds = g.create_dataset(n, data=arr)
                if dt is not None:
                    ds.attrs["dtype"] = dt
            if inter:
                gi = f.create_group("intermediates")
                for n, arr in inter.items():
                    gi.create_dataset(n, data=arr)
        _files.replace(tmp, path, inputs)
    except BaseException as e:
        try:
            if tmp is not None:
                os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise AssayError(f"{path}: cannot write ({e})") from None
        raise
    return path
