# assay.golden: reads a golden HDF5 file (golden/SCHEMA.md) with h5py: provenance, resolved case
# fields, inputs in their storage dtype (bit-level views of the stored codes), fp64 expected values.
"""Read an assay golden file.

>>> g = assay.golden.open("golden/scaled_add/int_exact.h5")
>>> g.case["alpha"], g.inputs["x"].dtype, g.expected["out"].shape
(0.5, dtype(bfloat16), (2, 65, 80))
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import h5py
import numpy as np

from . import dtypes, recipe as _recipe
from .errors import AssayError

__all__ = ["Golden", "OutputSpec", "open", "RECIPE_HASH_CHECK_BYTES"]

# A regenerated recipe input is checked against its recorded fnv1a64 when its codes take at most
# this many bytes: FNV-1a is sequential and runs in pure Python here (about 10 MB/s). The C++ reader
# (assay verify, compare, inspect, gen --check) always checks.
RECIPE_HASH_CHECK_BYTES = 1 << 20
_log = logging.getLogger("assay")  # phase times at INFO (python/README.md "Phase times")


@dataclass(frozen=True)
class OutputSpec:
    """One golden output: ``name``, ``dtype`` (the kernel-facing dtype name, e.g. ``"bf16"``),
    ``shape``, ``axes`` (tuple of axis names) and ``allow_nonfinite``. ``shape`` and ``axes`` are
    always those of the whole tensor the kernel writes, also in a sampled golden (whose expected
    values hold only the sampled elements: golden/SCHEMA.md "Sampled outputs")."""

    name: str
    dtype: str
    shape: tuple
    axes: tuple
    allow_nonfinite: bool


def _str(v) -> str:
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8", "replace")
    return str(v)


def _attr_value(v):
    """An HDF5 attribute as a plain Python value: strings decoded, numpy scalars unwrapped, a 1-byte
    integer as bool, 1-D arrays as lists, a null dataspace as an empty list."""
    if isinstance(v, h5py.Empty):
        return []
    if isinstance(v, (bytes, np.bytes_, str)):
        return _str(v)
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "SUO":
            return [_str(x) for x in v.reshape(-1)]
        return [_attr_value(x) for x in v.reshape(-1)]
    if isinstance(v, np.generic):
        if v.dtype == np.bool_ or (v.dtype.kind in "iu" and v.dtype.itemsize == 1):
            return bool(v)  # a 1-byte integer is a bool, as verify/io/h5.cpp reads it
        if v.dtype.kind in "iu":
            return int(v)
        if v.dtype.kind == "f":
            return float(v)
    return v


def _attrs(obj, where: str) -> dict:
    out = {}
    for k in obj.attrs:
        try:
            out[k] = _attr_value(obj.attrs[k])
        except (OSError, TypeError, ValueError) as e:
            raise AssayError(f"{where}: attribute {k}: cannot be read ({e})") from None
    return out


def _axes(ds) -> tuple:
    a = _str(ds.attrs.get("axes", b""))
    return tuple(x for x in a.split(",") if x) if a else ()


class _LazyArrays(Mapping):
    """name -> float64 array of one group, read from the file on first access."""

    def __init__(self, path: str, group: str, names: list[str]):
        self._path, self._group, self._names, self._cache = path, group, names, {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            with h5py.File(self._path, "r") as f:
                self._cache[name] = np.asarray(f[self._group][name][()], dtype=np.float64)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"<{self._group} of {self._path}: {', '.join(self._names)}>"


class _Inputs(Mapping):
    """name -> storage-dtype array; an input stored as its recipe is regenerated on first access
    (assay.recipe), its hash checked when small (RECIPE_HASH_CHECK_BYTES)."""

    def __init__(self, path: str):
        self._path, self._arrays, self._recipes, self._hashes, self._order = path, {}, {}, {}, []

    def _add_values(self, name, arr):
        self._arrays[name] = arr
        self._order.append(name)

    def _add_recipe(self, name, r, recorded_hash):
        self._recipes[name], self._hashes[name] = r, recorded_hash
        self._order.append(name)

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._arrays:
            return self._arrays[name]
        if name not in self._recipes:
            raise KeyError(name)
        r = self._recipes[name]
        where = f"{self._path}: /inputs/{name}"
        t0 = time.perf_counter()
        codes = _recipe.generate_codes(r, where)
        d = dtypes.get(r.dtype)
        _log.info("%s: regenerated from its recipe (%d %s elements) in %.1f s", where, codes.size, d.name,
                  time.perf_counter() - t0)
        if codes.nbytes <= RECIPE_HASH_CHECK_BYTES:
            h = _recipe.input_hash(name, r.dtype, r.shape, codes)
            if h != self._hashes[name]:
                raise AssayError(f"{where}: regenerated from its recipe, the codes hash to {h} but the golden recorded "
                                 f"{self._hashes[name]} (Stale: a recipe attribute or the hash edited)")
        arr = dtypes.view_codes(codes, d) if d.is_float else codes.view(dtypes.storage(d))
        self._arrays[name] = arr
        return arr

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


class Golden:
    """One golden file, read whole (intermediates lazily).

    Attributes:
      path, op, case_name, level: the file and its op, case and level.
      provenance: every root attribute (strings decoded, ``oracle_agreement`` parsed from JSON).
      case: the resolved case fields (``/case`` attributes) as int, float, bool, str or list.
      inputs: name -> numpy array in its storage dtype (``ml_dtypes.bfloat16``, ``np.float32``, ...),
        a bit-level view of the stored codes. An input the golden stores as its recipe (schema
        version 3, golden/SCHEMA.md "Inputs by recipe") is regenerated bit-identically on first
        access (assay.recipe); ``input_recipes`` holds those recipes by name.
      input_dtypes: name -> assay dtype name (``"bf16"``).
      inputs_f64: name -> the inputs' exact float64 values.
      expected: name -> float64 truth (a sampled golden: only the sampled elements, 1-D).
      outputs: name -> OutputSpec (the whole tensor's shape and axes).
      sample: None, or a sampled golden's slices: seqs, heads, tokens, batch_axis, token_axis,
        head_axes, head_count, token_count (golden/SCHEMA.md "Sampled outputs").
      axes: name -> tuple of axis names (inputs and outputs).
      intermediates: name -> float64 array (read on first access).
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        p = self.path
        if not os.path.exists(p):
            raise AssayError(f"{p}: no such file")
        if not os.path.isfile(p):
            raise AssayError(f"{p}: not a regular file")
        try:
            f = h5py.File(p, "r")
        except (OSError, ValueError):
            raise AssayError(f"{p}: not an HDF5 file (or unreadable)") from None
        with f:
            try:
                self._read(f, p)
            except AssayError:
                raise
            except (OSError, KeyError, TypeError, ValueError) as e:  # a damaged file h5py cannot read
                raise AssayError(f"{p}: malformed golden ({type(e).__name__}: {e})") from None
        self._f64 = None

    def _read(self, f, p: str):
        """Reads everything but the intermediates' values from the open file ``f`` (path ``p``)."""
        self.provenance = _attrs(f, f"{p}: /")
        if isinstance(self.provenance.get("oracle_agreement"), str):
            try:
                self.provenance["oracle_agreement"] = json.loads(self.provenance["oracle_agreement"])
            except json.JSONDecodeError:
                raise AssayError(f"{p}: attribute oracle_agreement: not JSON") from None
        for k in ("op", "case", "level"):
            if not isinstance(self.provenance.get(k), str):
                raise AssayError(f"{p}: missing root attribute {k} (not an assay golden?)")
        self.op = self.provenance["op"]
        self.case_name = self.provenance["case"]
        self.level = self.provenance["level"]
        for g in ("case", "inputs", "expected"):
            if not isinstance(f.get(g), h5py.Group):
                raise AssayError(f"{p}: /{g}: missing group")
        self.case = _attrs(f["case"], f"{p}: /case")
        self.inputs, self.input_dtypes, self.axes, self.input_recipes = _Inputs(p), {}, {}, {}
        for name, ds in f["inputs"].items():
            where = f"{p}: /inputs/{name}"
            if isinstance(ds, h5py.Group) and "storage" in ds.attrs:
                attrs = _attrs(ds, where)
                d = dtypes.get(str(attrs.get("dtype", "")), where)
                r = _recipe.from_attrs(name, attrs, where)
                if r.dtype != d.name:
                    r = _recipe.Recipe(**{**r.__dict__, "dtype": d.name})
                if "fnv1a64" not in attrs:
                    raise AssayError(f"{where}: missing attribute fnv1a64")
                self.inputs._add_recipe(name, r, str(attrs["fnv1a64"]))
                self.input_recipes[name] = r
                self.input_dtypes[name] = d.name
                self.axes[name] = tuple(x for x in str(attrs.get("axes", "")).split(",") if x)
                continue
            if not isinstance(ds, h5py.Dataset):
                raise AssayError(f"{where}: not a dataset")
            if "dtype" not in ds.attrs:
                raise AssayError(f"{where}: missing attribute dtype")
            d = dtypes.get(_str(ds.attrs["dtype"]), where)
            if ds.dtype.kind not in "iu":
                raise AssayError(f"{where}: {ds.dtype} dataset, expected integer storage codes of {d.name}")
            if ds.dtype.itemsize != d.nbytes:
                raise AssayError(f"{where}: {ds.dtype.itemsize}-byte integers cannot hold {d.name} codes")
            try:
                self.inputs._add_values(name, dtypes.view_codes(ds[()], d))
            except AssayError as e:
                raise AssayError(f"{where}: {e}") from None
            self.input_dtypes[name] = d.name
            self.axes[name] = _axes(ds)
        self.expected, self.outputs = {}, {}
        for name, ds in f["expected"].items():
            where = f"{p}: /expected/{name}"
            if not isinstance(ds, h5py.Dataset):
                raise AssayError(f"{where}: not a dataset")
            if ds.dtype != np.float64:
                raise AssayError(f"{where}: {ds.dtype} dataset, expected float64")
            if "dtype" not in ds.attrs:
                raise AssayError(f"{where}: missing attribute dtype")
            d = dtypes.get(_str(ds.attrs["dtype"]), where)
            self.expected[name] = ds[()]
            self.axes[name] = _axes(ds)
            shape = tuple(ds.shape)
            if "full_shape" in ds.attrs:  # sampled: the kernel writes the whole tensor
                shape = tuple(int(x) for x in np.atleast_1d(ds.attrs["full_shape"]))
                self.axes[name] = tuple(x for x in _str(ds.attrs.get("full_axes", b"")).split(",") if x)
                if len(shape) != len(self.axes[name]):
                    raise AssayError(f"{where}: attributes full_shape and full_axes disagree in rank")
            self.outputs[name] = OutputSpec(name, d.name, shape, self.axes[name],
                                            bool(_attr_value(ds.attrs.get("allow_nonfinite", 0))))
        # A sampled golden (schema version 4): which slices its expected values hold.
        smp = f.get("sample")
        self.sample = None
        if isinstance(smp, h5py.Group):
            self.sample = {k: [int(x) for x in smp[k][()]] for k in ("seqs", "heads", "tokens") if k in smp}
            self.sample.update({k: _attr_value(v) for k, v in smp.attrs.items()})
        inter = f.get("intermediates")
        names = [n for n, o in inter.items() if isinstance(o, h5py.Dataset)] if isinstance(inter, h5py.Group) else []
        for n in names:
            self.axes.setdefault(n, _axes(inter[n]))
        self.intermediates = _LazyArrays(p, "intermediates", names)
        self.intermediate_shapes = {n: tuple(inter[n].shape) for n in names}

    def sample_offsets(self, name: str) -> np.ndarray | None:
        """A sampled golden's output ``name``: the flat row-major offsets (int64) into the whole tensor
        of its stored elements, in the order golden/SCHEMA.md "Sampled outputs" gives (slice after
        slice; batch = the slice's sequence, each head axis of n at head * n // head_count, the token
        axis at ``tokens``); None for a golden that is not sampled."""
        if self.sample is None:
            return None
        o, sp = self.outputs[name], self.sample
        heads = set(x for x in str(sp["head_axes"]).split(",") if x)
        all_tokens = len(sp["tokens"]) == sp["token_count"]
        parts = []
        for b, h in zip(sp["seqs"], sp["heads"]):
            idx = []
            for ax, n in zip(o.axes, o.shape):
                if ax == sp["batch_axis"]:
                    idx.append([b])
                elif ax in heads:
                    idx.append([h * n // sp["head_count"]])
                elif ax == sp["token_axis"] and not all_tokens:
                    idx.append(sp["tokens"])
                else:
                    idx.append(range(n))
            grids = np.meshgrid(*[np.asarray(list(i), dtype=np.int64) for i in idx], indexing="ij")
            parts.append(np.ravel_multi_index([g.reshape(-1) for g in grids], o.shape).astype(np.int64))
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    @property
    def inputs_f64(self) -> dict[str, np.ndarray]:
        """name -> the input's exact float64 values (integers as float64)."""
        if self._f64 is None:
            self._f64 = {n: dtypes.to_float64(a) for n, a in self.inputs.items()}
        return self._f64

    def to_torch(self, device=None, names=None) -> dict:
        """name -> torch tensor of the input's storage dtype (torch.bfloat16, torch.float8_e4m3fn,
        torch.float8_e8m0fnu, torch.float32, torch.int32, ...), bit-exact (built by viewing the codes).

        fp4e2m1 inputs are returned as torch.uint8 tensors of the codes (one code per byte, in the
        low nibble): torch has no unpacked fp4 dtype (torch.float4_e2m1fn_x2 packs two per byte).
        ``device``: e.g. "cuda"; ``names``: only these inputs."""
        import torch  # lazy: torch is optional

        out = {}
        for n in names if names is not None else self.inputs:
            if n not in self.inputs:
                raise AssayError(f"{self.path}: no input '{n}' (inputs: {', '.join(self.inputs)})")
            d = dtypes.get(self.input_dtypes[n])
            a = np.ascontiguousarray(self.inputs[n])
            if d.is_float:
                signed = np.dtype(f"int{8 * d.nbytes}") if d.nbytes > 1 else np.dtype(np.uint8)
                t = torch.from_numpy(a.view(signed).copy())
                if d.torch:
                    t = t.view(dtypes.torch_dtype(d))
            elif d.name == "uint32":  # torch's uint32 has few operations: keep the bits, view after
                t = torch.from_numpy(a.view(np.int32).copy()).view(torch.uint32)
            else:
                t = torch.from_numpy(a.copy())
            out[n] = t.to(device) if device is not None else t
        return out

    def to_jax(self, names=None) -> dict:
        """name -> jax array of the input's storage dtype (ml_dtypes dtypes are JAX's own)."""
        import jax.numpy as jnp  # lazy: jax is optional

        return {n: jnp.asarray(self.inputs[n]) for n in (names if names is not None else self.inputs)}

    def __repr__(self) -> str:
        return f"<Golden {self.op}/{self.case_name} {self.level} inputs={list(self.inputs)} outputs={list(self.outputs)}>"


def open(path) -> Golden:  # noqa: A001 (assay.golden.open mirrors builtins.open on purpose)
    """Reads the golden at ``path``. AssayError (one line naming the file and dataset) on bad input."""
    return Golden(path)

