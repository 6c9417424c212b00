# assay.recipe: regenerates an input that a golden stores as its recipe (golden/SCHEMA.md "Inputs by
# recipe"), bit for bit as the C++ generator (fixtures/gen/inputs.cpp, philox.h, portable_math.h)
# makes it, vectorised with numpy: Philox4x32-10 on uint32 arrays, the same float mapping in fp64
# with every operation in the C++ order (it is built with -ffp-contract=off, and numpy never fuses),
# the polar method's rejection loop as a loop over the still-rejected elements (masks), RNE
# rounding to the storage dtype with satfinite, and the specials at the same seeded positions.
"""Regenerate recipe inputs of assay goldens bit-identically to the C++ generator.

>>> codes = assay.recipe.generate_codes(recipe)   # numpy array of the storage codes (uint16 for bf16)
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import dtypes
from .errors import AssayError

__all__ = ["Recipe", "generate_codes", "input_hash", "fnv1a64", "RNG_NAME"]

RNG_NAME = "philox4x32-10/assay-inputs-v1"
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_KINDS = ("normal", "uniform", "int", "l2norm", "log_gate", "const")
_SPECIALS = ("nan", "inf", "-inf", "zero", "-zero", "subnormal", "-subnormal", "max", "-max")

# Per float storage dtype: explicit mantissa bits, smallest normal exponent, largest finite value,
# whether it has Inf, and the code C++ encode() gives a NaN (reference/core/dtype.cpp; fp4e2m1 has
# no NaN: encode(NaN) is +6, code 0x7).
_FLOAT = {
    "fp64": (52, -1022, float(np.finfo(np.float64).max), True, 0x7FF8000000000000),
    "fp32": (23, -126, float(np.finfo(np.float32).max), True, 0x7FC00000),
    "bf16": (7, -126, float.fromhex("0x1.FEp127"), True, 0x7FC0),
    "fp16": (10, -14, 65504.0, True, 0x7E00),
    "fp8e4m3": (3, -6, 448.0, False, 0x7F),
    "fp8e5m2": (2, -14, 57344.0, True, 0x7F),
    "fp4e2m1": (1, 0, 6.0, False, 0x7),
}
_MIN_SUBNORMAL = {"fp64": 2.0**-1074, "fp32": 2.0**-149, "bf16": 2.0**-133, "fp16": 2.0**-24,
                  "fp8e4m3": 2.0**-9, "fp8e5m2": 2.0**-16, "fp4e2m1": 0.5}

# Elements per chunk: a few MB of uint64 temporaries each, so big tensors stream through the cache.
CHUNK = 1 << 16


@dataclass(frozen=True)
class Recipe:
    """Everything that regenerates one input: the Philox ``stream`` ("<op>/<case>/<tensor>") and
    ``seed``, the distribution (``kind``; ``a``, ``b``: mean/std, lo/hi or value; ``scale``;
    ``specials`` as (value, count) pairs), the storage ``dtype`` (assay name) and ``shape``."""

    stream: str
    seed: int
    kind: str
    a: float
    b: float
    scale: float
    specials: tuple = ()
    dtype: str = "fp32"
    shape: tuple = ()
    name: str = field(default="", compare=False)

    @property
    def numel(self) -> int:
        n = 1
        for e in self.shape:
            n *= int(e)
        return n


def fnv1a64(data, h: int = 0xCBF29CE484222325) -> int:
    """FNV-1a 64 of bytes (pure Python: about 10 MB/s; for short strings and small tensors)."""
    for b in bytes(data):
        h = ((h ^ b) * 0x100000001B3) & _MASK64
    return h


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def stream_key(stream: str, seed: int) -> tuple[int, int]:
    """The Philox key words: splitmix64(fnv1a64(stream) ^ splitmix64(seed)) (fixtures/gen/inputs.cpp)."""
    k = _splitmix64(fnv1a64(stream.encode("utf-8")) ^ _splitmix64(seed & _MASK64))
    return k & _MASK32, k >> 32


def philox4x32_10(c0, c1, c2, c3, key):
    """Philox4x32-10 on uint32 arrays (or scalars broadcast against them): four uint32 arrays."""
    c = [np.asarray(x, dtype=np.uint32) for x in (c0, c1, c2, c3)]
    shape = np.broadcast_shapes(*(x.shape for x in c))
    r = _philox_u64(*(np.broadcast_to(x, shape).astype(np.uint64) for x in c), key)
    return tuple(x.astype(np.uint32) for x in r)


_LO32 = np.uint64(_MASK32)
_SH32 = np.uint64(32)


def _philox_u64(c0, c1, c2, c3, key):
    """Philox4x32-10 on uint64 arrays holding 32-bit words (the 32x32 -> 64-bit products fit, so no
    conversions in the rounds); the arguments are consumed."""
    k0, k1 = key
    p0 = np.empty_like(c0)
    p1 = np.empty_like(c0)
    for rnd in range(10):
        if rnd > 0:
            k0 = (k0 + _W0) & _MASK32
            k1 = (k1 + _W1) & _MASK32
        np.multiply(c0, _M0, out=p0)
        np.multiply(c2, _M1, out=p1)
        # c0' = hi(p1) ^ c1 ^ k0, c1' = lo(p1), c2' = hi(p0) ^ c3 ^ k1, c3' = lo(p0)
        np.right_shift(p1, _SH32, out=c0)
        c0 ^= c1
        c0 ^= np.uint64(k0)
        np.bitwise_and(p1, _LO32, out=c1)
        np.right_shift(p0, _SH32, out=c2)
        c2 ^= c3
        c2 ^= np.uint64(k1)
        np.bitwise_and(p0, _LO32, out=c3)
    return c0, c1, c2, c3


def _u53(hi, lo):
    """Stream::u53: the top 53 of the 64 bits (hi:lo) as a double in [0, 1)."""
    bits = (hi.astype(np.uint64) << _SH32) | lo.astype(np.uint64)
    bits >>= np.uint64(11)
    return bits.astype(np.float64) * 2.0**-53


def _block(idx, attempt: int, purpose: int, key):
    """Stream::block(i, attempt, purpose) for a uint64 array of element indices: four uint64 arrays
    of 32-bit words."""
    return _philox_u64(idx & _LO32, idx >> _SH32, np.full(idx.shape, attempt, np.uint64),
                       np.full(idx.shape, purpose, np.uint64), key)


_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_ODD = [1.0 / (2 * k + 1) for k in range(16)]


def portable_log(x):
    """fixtures/gen/portable_math.h portable_log, elementwise, in the same operation order (in place
    where that changes no result: (0 + c) * s2 is c * s2 exactly)."""
    m, e = np.frexp(x)
    low = m < 0.70710678118654752440
    m = np.where(low, m * 2.0, m)
    e = (e - low).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    poly = s2 * _INV_ODD[15]
    for k in range(14, 0, -1):
        poly += _INV_ODD[k]
        poly *= s2
    s *= 2.0
    poly *= s
    poly += s  # logm = 2.0 * s + 2.0 * s * poly
    poly += e * _LN2_LO
    e *= _LN2_HI
    e += poly
    return e


def _std_normal(idx, key, attempt: int = 0):
    """Marsaglia's polar method per element: attempt 0, 1, ... until q in (0, 1). Every element is
    computed at this attempt; the rejected ones are redone at the next attempt."""
    r0, r1, r2, r3 = _block(idx, attempt, 0, key)
    u = _u53(r0, r1)
    u *= 2.0
    u -= 1.0
    v = _u53(r2, r3)
    v *= 2.0
    v -= 1.0
    q = u * u
    v *= v
    q += v
    bad = ~((q > 0.0) & (q < 1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = portable_log(q)
        z *= -2.0
        z /= q
        np.sqrt(z, out=z)
    z *= u
    if bad.any():
        z[bad] = _std_normal(idx[bad], key, attempt + 1)
    return z


def _sample(r: Recipe, key, lo: int, hi: int):
    """Values (before rounding, scale applied) of elements [lo, hi); l2norm chunks hold whole rows."""
    idx = np.arange(lo, hi, dtype=np.uint64)
    if r.kind in ("normal", "l2norm"):
        z = _std_normal(idx, key)
        if r.kind == "normal":
            x = r.a + r.b * z
        else:
            row = int(r.shape[-1]) if r.shape else 0
            x = z
            if row > 0:
                v = x.reshape(-1, row)
                ss = np.zeros(v.shape[0])
                for j in range(row):  # sequential, as the C++ loop (not numpy's pairwise sum)
                    ss += v[:, j] * v[:, j]
                with np.errstate(divide="ignore", invalid="ignore"):
                    inv = 1.0 / np.sqrt(ss)
                x = (v * inv[:, None]).reshape(-1)
    elif r.kind == "const":
        x = np.full(idx.shape, r.a, dtype=np.float64)
    else:
        b0, b1, _, _ = _block(idx, 0, 0, key)
        u = _u53(b0, b1)
        if r.kind == "int":
            x = r.a + np.floor(u * (r.b - r.a + 1.0))
        else:  # uniform, log_gate
            x = r.a + (r.b - r.a) * u
    if r.scale != 1.0:
        x = x * r.scale
    return x


def _round(x, dname: str):
    """round_to(dtype, x, satfinite) for finite x: RNE to the format's grid, overflow to +-max."""
    if dname == "fp64":
        return x
    mant, emin, mx, _, _ = _FLOAT[dname]
    _, e = np.frexp(x)
    quantum = np.ldexp(1.0, np.maximum(e - 1, emin) - mant)
    with np.errstate(invalid="ignore"):
        r = np.rint(x / quantum) * quantum
    return np.where(np.abs(r) > mx, np.copysign(mx, x), r)


def _special_value(s: str, d: dtypes.DType) -> float:
    """decode(encode(value)) of a special, as Inputs::add stores it (C++ encode, Overflow::nonsat)."""
    if not d.is_float:
        if s in ("nan", "inf", "-inf"):
            raise AssayError(f"special '{s}' on integer dtype {d.name} is not regenerated by python/assay")
        return -0.0 if s.startswith("-") else 0.0  # an integer dtype's subnormal and max are 0
    mant, emin, mx, has_inf, _ = _FLOAT[d.name]
    sub = _MIN_SUBNORMAL[d.name]
    table = {"nan": float("nan"), "zero": 0.0, "-zero": -0.0, "subnormal": sub, "-subnormal": -sub, "max": mx, "-max": -mx}
    if s in table:
        return table[s]
    sign = -1.0 if s == "-inf" else 1.0
    if has_inf:
        return sign * float("inf")
    if d.name == "fp4e2m1":  # no Inf, no NaN: saturates
        return sign * mx
    return float("nan")  # fp8e4m3: Inf encodes to its NaN


def _to_codes(values, d: dtypes.DType):
    """The storage codes of exactly representable values (NaN as C++ encode's canonical NaN)."""
    if not d.is_float:
        return values.astype(dtypes.storage(d)).view(d.codes)
    st = dtypes.storage(d)
    with np.errstate(invalid="ignore", over="ignore"):
        codes = values.astype(st).view(d.codes)
    nan = np.isnan(values)
    if nan.any():
        codes = codes.copy()
        codes[nan] = _FLOAT[d.name][4]
    return codes


def _check(r: Recipe, where: str):
    d = dtypes.lookup(r.dtype)
    if d is None:
        raise AssayError(f"{where}: unknown dtype '{r.dtype}'")
    if d.name not in _FLOAT and d.is_float:
        raise AssayError(f"{where}: python/assay does not regenerate {d.name} inputs (assay gen stores them as values)")
    if r.kind not in _KINDS:
        raise AssayError(f"{where}: attribute dist_kind: unknown distribution '{r.kind}'")
    if not d.is_float and r.kind not in ("int", "const"):
        raise AssayError(f"{where}: integer dtype {d.name} needs kind = \"int\"")
    for k in ("a", "b", "scale"):
        if not np.isfinite(getattr(r, k)):
            raise AssayError(f"{where}: attribute dist_{k}: {getattr(r, k)} is not a finite number")
    if any(int(e) < 0 for e in r.shape):
        raise AssayError(f"{where}: attribute shape: negative extent")
    total = 0
    for v, c in r.specials:
        if v not in _SPECIALS or int(c) < 0:
            raise AssayError(f"{where}: attribute specials: bad entry ({v!r}, {c!r})")
        total += int(c)
    if total > r.numel:
        raise AssayError(f"{where}: attribute specials: the counts add up to more than the {r.numel} elements")
    return d


def _threads() -> int:
    env = os.environ.get("ASSAY_RECIPE_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(8, os.cpu_count() or 1))


def generate_codes(r: Recipe, where: str = "", threads: int | None = None) -> np.ndarray:
    """The storage codes (unsigned, ``shape``) of the input ``r`` describes, bit-identical to what
    ``assay gen`` made. numpy releases the GIL in its loops, so chunks run on ``threads`` threads
    (default: min(8, cpus), or $ASSAY_RECIPE_THREADS). AssayError naming ``where`` on a bad recipe."""
    where = where or r.name or r.stream
    d = _check(r, where)
    n = r.numel
    key = stream_key(r.stream, r.seed)
    codes = np.empty(n, dtype=d.codes)  # written chunk by chunk: no fp64 copy of the whole tensor
    chunk = CHUNK
    if r.kind == "l2norm" and r.shape and int(r.shape[-1]) > 0:
        row = int(r.shape[-1])
        chunk = max(1, chunk // row) * row  # whole rows per chunk
    bounds = [(lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]

    def work(b):
        lo, hi = b
        x = _sample(r, key, lo, hi)
        codes[lo:hi] = _to_codes(_round(x, d.name) if d.is_float else x, d)

    nt = threads or _threads()
    if nt > 1 and len(bounds) > 1:
        with ThreadPoolExecutor(nt) as ex:
            list(ex.map(work, bounds))
    else:
        for b in bounds:
            work(b)
    if r.specials:
        taken = np.zeros(n, dtype=bool)
        draw = 0
        for s, count in r.specials:
            code = _to_codes(np.array([_special_value(s, d)]), d)[0]
            for _ in range(int(count)):
                while True:
                    b0, b1, _, _ = _block(np.array([draw], dtype=np.uint64), 0, 1, key)
                    draw += 1
                    pos = int(np.floor(_u53(b0, b1)[0] * float(n)))
                    if not taken[pos]:
                        break
                taken[pos] = True
                codes[pos] = code
    return codes.reshape(tuple(int(e) for e in r.shape))


def input_hash(name: str, dtype: str, shape, codes: np.ndarray) -> str:
    """The input's fnv1a64 (golden/SCHEMA.md): over "<name>|<dtype>|<shape>" then the little-endian
    storage bytes. Pure Python: use it on small tensors."""
    d = dtypes.get(dtype)
    hdr = f"{name}|{d.name}|[{', '.join(str(int(e)) for e in shape)}]"
    h = fnv1a64(hdr.encode())
    h = fnv1a64(np.ascontiguousarray(codes).astype(d.codes.newbyteorder("<")).tobytes(), h)
    return f"{h:016x}"


def from_attrs(name: str, attrs: dict, where: str) -> Recipe:
    """The Recipe of a golden's /inputs/<name> group from its decoded attributes."""
    try:
        if attrs.get("storage") != "recipe":
            raise AssayError(f"{where}: attribute storage: expected \"recipe\"")
        if attrs.get("rng") != RNG_NAME:
            raise AssayError(f"{where}: attribute rng: {attrs.get('rng')!r} is not {RNG_NAME!r}")
        sp = json.loads(attrs["specials"])
        if not isinstance(sp, list) or not all(isinstance(e, dict) and isinstance(e.get("value"), str)
                                               and isinstance(e.get("count"), int) for e in sp):
            raise AssayError(f"{where}: attribute specials: expected a JSON array of {{value, count}}")
        shape = attrs["shape"]
        shape = tuple(int(e) for e in (shape if isinstance(shape, list) else [shape]))
        seed = int(attrs["seed"])
        if not 0 <= seed <= _MASK64:
            raise ValueError("seed out of range")
        return Recipe(stream=str(attrs["stream"]), seed=seed, kind=str(attrs["dist_kind"]), a=float(attrs["dist_a"]),
                      b=float(attrs["dist_b"]), scale=float(attrs["dist_scale"]),
                      specials=tuple((e["value"], e["count"]) for e in sp), dtype=str(attrs["dtype"]), shape=shape,
                      name=name)
    except KeyError as e:
        raise AssayError(f"{where}: missing attribute {e.args[0]}") from None
    except (TypeError, ValueError, json.JSONDecodeError) as e:
        raise AssayError(f"{where}: malformed recipe attribute ({e})") from None
