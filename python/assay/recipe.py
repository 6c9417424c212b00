# assay.recipe: regenerates an input that a golden stores as its recipe (golden/SCHEMA.md "Inputs by
# recipe"), bit for bit as the C++ generator (fixtures/gen/inputs.cpp, philox.h, portable_math.h)
# makes it, vectorised with numpy: Philox4x32-10 with each 32-bit word in a uint64 lane, the same
# float mapping in fp64 with every operation in the C++ order (it is built with -ffp-contract=off,
# and numpy never fuses), the polar method's rejected elements redone compacted, RNE rounding to the
# storage dtype with satfinite as integer steps on the fp64 bits, and the specials at the same seeded
# positions. Every pass writes into a thread's preallocated buffers (out=): blocks of BLOCK elements
# stay in cache, and tasks of TASK elements are shared out to threads (numpy releases the GIL).
"""Regenerate recipe inputs of assay goldens bit-identically to the C++ generator.

>>> codes = assay.recipe.generate_codes(recipe)   # numpy array of the storage codes (uint16 for bf16)
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from . import dtypes
from .errors import AssayError

__all__ = ["Recipe", "generate_codes", "input_hash", "fnv1a64", "RNG_NAME"]

RNG_NAME = "philox4x32-10/assay-inputs-v1"
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
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

# Elements per block: a thread's block buffers (ten arrays of 8 bytes an element) stay in a 2-4 MB
# L2, and a ufunc pass is long enough (about 10 us) that the GIL, held between passes, is rarely
# waited for. A task (what a thread takes at a time) is several blocks: the polar method's rejected
# elements are redone over a whole task, so the passes over the few left cost little per element.
BLOCK = 1 << 15
TASK = 1 << 18


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
    m = int(np.prod(shape, dtype=np.int64))
    pool = [np.empty(m, np.uint64) for _ in range(2)]
    words = [np.broadcast_to(x, shape).reshape(-1).astype(np.uint64) for x in c]
    r = _philox(words, _round_keys(key), pool)
    return tuple(_as_array(x, m).astype(np.uint32).reshape(shape) for x in r)


# ---- Philox on uint64 arrays, with counter words that are the same for a whole chunk as ints ----
#
# Each 32-bit word lives in a uint64 lane, so a round is ten ufunc passes: two 32x32 -> 64-bit
# products, hi = p >> 32, lo = p & mask and four XORs, all written into preallocated buffers
# (``pool``: no allocation, so no page faults and no allocator traffic between threads). A word that
# is one value for every element of the call (the index's high word, attempt, purpose, and after the
# first rounds what they feed) is kept as a Python int: the first round costs four passes, the
# second five. A two-word draw (uniform, int, the specials' positions) drops what round 10 and the
# two words round 9 leave unused.

def _u64(v: int) -> np.ndarray:
    return np.array(v, dtype=np.uint64)  # a 0-d array: the cheapest operand for a ufunc call


_C_M0, _C_M1, _C_LO, _C_32 = _u64(_M0), _u64(_M1), _u64(_MASK32), _u64(32)


def _round_keys(key):
    """The ten rounds' (k0, k1) and the same as 0-d uint64 arrays."""
    k0, k1 = key
    out = []
    for rnd in range(10):
        if rnd:
            k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
        out.append((k0, k1, _u64(k0), _u64(k1)))
    return out


def _as_array(x, m: int) -> np.ndarray:
    return np.full(m, x, dtype=np.uint64) if isinstance(x, int) else x


def _hi_xor(p, c, k: int, kk, pool):
    """hi(p) ^ c ^ k, each of p and c an int or a uint64 array; an array result comes from pool."""
    if isinstance(p, int):
        if isinstance(c, int):
            return (p >> 32) ^ c ^ k
        out = pool.pop()
        np.bitwise_xor(c, _u64((p >> 32) ^ k), out)
        return out
    out = pool.pop()
    np.right_shift(p, _C_32, out)
    if isinstance(c, int):
        if c ^ k:
            np.bitwise_xor(out, _u64(c ^ k), out)
    else:
        np.bitwise_xor(out, c, out)
        if k:
            np.bitwise_xor(out, kk, out)
    return out


def _lo(p):
    if isinstance(p, int):
        return p & _MASK32
    np.bitwise_and(p, _C_LO, p)  # in place: the product's buffer becomes the word's
    return p


def _mul(c, mk, mi: int, pool):
    if isinstance(c, int):
        return c * mi
    out = pool.pop()
    np.multiply(c, mk, out)
    pool.append(c)  # c is dead once multiplied
    return out


def _free(x, pool):
    if isinstance(x, np.ndarray):
        pool.append(x)


def _philox(c, rk, pool, need: int = 4):
    """Philox4x32-10 of the counter words c (ints or uint64 arrays of 32-bit values; the arrays are
    consumed): four words, each an int or an array from pool, a list of free uint64 buffers of the
    arrays' length (with the counters', six in all suffice). need=2: only the first two words are
    made (the others are None)."""
    c0, c1, c2, c3 = c
    for rnd in range(10):
        k0, k1, kk0, kk1 = rk[rnd]
        if need == 2 and rnd == 9:  # round 10 of a two-word draw: only c0, c1
            p1 = _mul(c2, _C_M1, _M1, pool)
            n0 = _hi_xor(p1, c1, k0, kk0, pool)
            _free(c1, pool)
            return n0, _lo(p1), None, None
        p0 = _mul(c0, _C_M0, _M0, pool)
        p1 = _mul(c2, _C_M1, _M1, pool)
        # c0' = hi(p1) ^ c1 ^ k0, c1' = lo(p1), c2' = hi(p0) ^ c3 ^ k1, c3' = lo(p0); a two-word
        # draw's round 10 reads only c1 and c2 of round 9
        n0 = None if need == 2 and rnd == 8 else _hi_xor(p1, c1, k0, kk0, pool)
        _free(c1, pool)
        c1 = _lo(p1)
        n2 = _hi_xor(p0, c3, k1, kk1, pool)
        _free(c3, pool)
        if n0 is None:
            _free(p0, pool)
            c0, c2, c3 = None, n2, None
        else:
            c0, c2, c3 = n0, n2, _lo(p0)
    return c0, c1, c2, c3


def _u53(hi, lo):
    """Stream::u53: the top 53 of the 64 bits (hi:lo) as a double in [0, 1)."""
    bits = (np.asarray(hi).astype(np.uint64) << np.uint64(21)) | (np.asarray(lo).astype(np.uint64) >> np.uint64(11))
    return bits.astype(np.float64) * 2.0**-53


def _block(idx, attempt: int, purpose: int, key):
    """Stream::block(i, attempt, purpose) for a uint64 array of element indices: four uint64 arrays
    of 32-bit words."""
    idx = np.asarray(idx, dtype=np.uint64).reshape(-1)
    m = idx.size
    pool = [np.empty(m, np.uint64) for _ in range(4)]
    c0, c1 = idx & np.uint64(_MASK32), idx >> np.uint64(32)
    return tuple(_as_array(x, m) for x in _philox([c0, c1, attempt, purpose], _round_keys(key), pool))


_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_ODD = [1.0 / (2 * k + 1) for k in range(16)]


def portable_log(x):
    """fixtures/gen/portable_math.h portable_log, elementwise, in the same operation order (in place
    where that changes no result: (0 + c) * s2 is c * s2 exactly). The plain statement of it: the
    normal path runs _neg2log, which gives -2 * portable_log(q) bit for bit for q in (0, 1)."""
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


def _f64(v: float) -> np.ndarray:
    return np.array(v, dtype=np.float64)


_I_OFF = np.array(0x3FE6A09E667F3BCD, dtype=np.int64)  # the bits of 0.70710678118654752440
_I_52 = np.array(52, dtype=np.int64)
_F_ONE, _F_M4 = _f64(1.0), _f64(-4.0)
_F_N2LN2_HI, _F_N2LN2_LO = _f64(-2.0 * _LN2_HI), _f64(-2.0 * _LN2_LO)
_F_INV_ODD = [_f64(c) for c in _INV_ODD]
_F_2M52, _F_2M53 = _f64(2.0**-52), _f64(2.0**-53)
_I_21, _I_11 = _u64(21), _u64(11)


def _neg2log(q, out, t, mb, s):
    """out = -2 * portable_log(q) for q in (0, 1), bit for bit, with t, mb, s float64 scratch of q's
    length. frexp and the m < sqrt(1/2) test become integer steps on q's bits (musl's log
    reduction: k = (bits - bits(sqrt(1/2))) >> 52, m = q / 2^k in [sqrt(1/2), sqrt(2)), the same m and
    e as frexp and the doubling), and the -2 is folded into s and the ln2 constants: a power-of-two
    scaling commutes with every rounding here (no overflow, no underflow, no zero result: q < 1)."""
    qb, ti, mi = q.view(np.int64), t.view(np.int64), mb.view(np.int64)
    np.subtract(qb, _I_OFF, ti)
    np.right_shift(ti, _I_52, ti)  # k = e (arithmetic shift)
    np.left_shift(ti, _I_52, mi)
    np.subtract(qb, mi, mi)  # m's bits: q with k taken off its exponent
    np.multiply(ti, _F_ONE, out)  # e as a double (exact)
    m = mb
    np.subtract(m, _F_ONE, s)
    np.add(m, _F_ONE, m)
    np.divide(s, m, s)  # s = (m - 1) / (m + 1)
    s2, poly = t, m
    np.multiply(s, s, s2)
    np.multiply(s2, _F_INV_ODD[15], poly)
    for k in range(14, 0, -1):
        np.add(poly, _F_INV_ODD[k], poly)
        np.multiply(poly, s2, poly)
    np.multiply(s, _F_M4, s)  # -2 * (2 s)
    np.multiply(poly, s, poly)
    np.add(poly, s, poly)  # -2 * logm
    np.multiply(out, _F_N2LN2_LO, s2)
    np.add(poly, s2, poly)  # -2 * (logm + e ln2_lo)
    np.multiply(out, _F_N2LN2_HI, out)
    np.add(out, poly, out)  # -2 * (e ln2_hi + (logm + e ln2_lo))
    return out


class _Work:
    """One thread's buffers: for a block of up to ``block`` elements seven uint64 (Philox words,
    scratch viewed as float64 or int64), u2, q2 (float64: redone polar attempts) and a bool mask;
    for a task of up to ``task`` elements (several blocks) the polar method's u and q."""

    def __init__(self, block: int, task: int):
        self.w = [np.empty(block, np.uint64) for _ in range(7)]
        self.u2, self.q2 = np.empty(block, np.float64), np.empty(block, np.float64)
        self.mask = np.empty(block, np.bool_)
        self.u, self.q = np.empty(task, np.float64), np.empty(task, np.float64)


_IOTA: dict = {}


def _iota(n: int) -> np.ndarray:
    a = _IOTA.get(n)
    if a is None:
        a = _IOTA[n] = np.arange(n, dtype=np.uint64)
        a.setflags(write=False)
    return a


def _counters(lo: int, m: int, offsets, pool):
    """The counter words c0, c1 of elements lo + offsets (offsets None: lo .. lo + m - 1): c0 from
    pool, c1 an int when every index has the same high word."""
    base = _iota(m) if offsets is None else offsets
    c0 = pool.pop()
    if lo >> 32 == (lo + int(base[-1])) >> 32:
        np.add(base, _u64(lo & _MASK32), c0)
        return c0, lo >> 32
    c1 = pool.pop()
    np.add(base, _u64(lo), c0)
    np.right_shift(c0, _C_32, c1)
    np.bitwise_and(c0, _C_LO, c0)
    return c0, c1


def _unit(hi, lo, scale, out):
    """out = ((hi << 21) | (lo >> 11)) * scale: u53 for scale 2^-53, 2 u53 for 2^-52 (exact); hi, lo
    are consumed."""
    np.left_shift(hi, _I_21, hi)
    np.right_shift(lo, _I_11, lo)
    np.bitwise_or(hi, lo, hi)
    np.multiply(hi.view(np.int64), scale, out)  # < 2^53: the int64 -> double conversion is exact
    return out


def _polar_uq(lo: int, m: int, offsets, attempt, rk, ws, u, q):
    """u and q = u*u + v*v of the polar method's attempt (an int, or a uint64 array: one per
    element) for elements lo + offsets (ascending; None: lo .. lo + m - 1) into u, q (length m);
    returns the mask of the rejected ones (q not in (0, 1)) in ws.mask."""
    pool = [w[:m] for w in ws.w[:6]]
    c0, c1 = _counters(lo, m, offsets, pool)
    r0, r1, r2, r3 = _philox([c0, c1, attempt, 0], rk, pool)
    _unit(r0, r1, _F_2M52, u)
    np.subtract(u, _F_ONE, u)  # 2 u53 - 1, exactly
    v = ws.w[6][:m].view(np.float64)
    _unit(r2, r3, _F_2M52, v)
    np.subtract(v, _F_ONE, v)
    np.multiply(u, u, q)
    np.multiply(v, v, v)
    np.add(q, v, q)
    bad = ws.mask[:m]
    np.greater_equal(q, _F_ONE, bad)
    if not q.all():
        bad |= q == 0.0
    return bad


# A pass over the still-rejected elements costs about a hundred ufunc calls whatever their number:
# they are gathered over a whole task (several blocks), and while few remain one pass tries several
# attempts of each (the first accepted one is taken).
_REDO_BATCH = 2048


def _polar_task(lo: int, n: int, block: int, rk, ws):
    """The accepted u and q of elements lo .. lo + n - 1 in ws.u[:n], ws.q[:n] (Marsaglia's polar
    method: attempt 0, 1, ... until q in (0, 1)). Attempt 0 runs block by block; the rejected
    elements are redone, compacted, at the next attempts and put in place."""
    u, q = ws.u[:n], ws.q[:n]
    parts = []
    for b0 in range(0, n, block):
        m = min(block, n - b0)
        bad = _polar_uq(lo + b0, m, None, 0, rk, ws, u[b0:b0 + m], q[b0:b0 + m])
        if bad.any():
            p = np.flatnonzero(bad)
            p += b0
            parts.append(p)
    pos = (np.concatenate(parts) if parts else np.empty(0, np.int64)).view(np.uint64)  # ascending
    attempt, cap = 1, min(_REDO_BATCH, block)
    while pos.size:
        k = pos.size
        tries = max(1, min(8, cap // k))
        if tries == 1:
            left = []
            for s0 in range(0, k, block):
                pp = pos[s0:s0 + block]
                kk = pp.size
                uk, qk = ws.u2[:kk], ws.q2[:kk]
                bad = _polar_uq(lo, kk, pp, attempt, rk, ws, uk, qk)
                u[pp.view(np.int64)] = uk
                q[pp.view(np.int64)] = qk
                left.append(np.compress(bad, pp))
            pos = np.concatenate(left)
        else:  # attempt + t for element j at t * k + j
            kt = k * tries
            uk, qk = ws.u2[:kt], ws.q2[:kt]
            att = np.repeat(np.arange(attempt, attempt + tries, dtype=np.uint64), k)
            ok = ~_polar_uq(lo, kt, np.tile(pos, tries), att, rk, ws, uk, qk).reshape(tries, k)
            first = ok.argmax(axis=0)
            got = ok[first, np.arange(k)]
            at = (first * k + np.arange(k))[got]
            dst = pos[got].view(np.int64)
            u[dst] = uk[at]
            q[dst] = qk[at]
            pos = pos[~got]
        attempt += tries
    return u, q


def _polar_z(u, q, ws):
    """u * sqrt(-2 portable_log(q) / q), in ws.w[2] as float64."""
    m = u.size
    f = [w[:m].view(np.float64) for w in ws.w[:4]]
    z = _neg2log(q, f[2], f[0], f[1], f[3])
    np.divide(z, q, z)
    np.sqrt(z, z)
    np.multiply(z, u, z)
    return z


def _finish(r: Recipe, x, ws):
    """A block's values after element_value: an l2norm row divided by its norm (the block holds
    whole rows), then the scale (fixtures/gen/inputs.cpp finish_values)."""
    m = x.size
    if r.kind == "l2norm" and r.shape and int(r.shape[-1]) > 0:
        row = int(r.shape[-1])
        v = x.reshape(-1, row)
        sq = ws.w[0][:m].view(np.float64).reshape(-1, row)
        np.multiply(v, v, sq)
        acc = ws.w[1][:m].view(np.float64).reshape(-1, row)
        np.add.accumulate(sq, axis=1, out=acc)  # sequential, as the C++ loop (not pairwise)
        inv = 1.0 / np.sqrt(acc[:, -1])
        np.multiply(v, inv[:, None], v)
    if r.scale != 1.0:
        np.multiply(x, _f64(r.scale), x)
    return x


def _task(r: Recipe, d, plan, lo: int, hi: int, block: int, rk, ws, codes):
    """The codes of elements [lo, hi) into codes[lo:hi], a block at a time (blocks of an l2norm
    hold whole rows)."""
    n = hi - lo
    if r.kind in ("normal", "l2norm"):
        u, q = _polar_task(lo, n, block, rk, ws)
    for b0 in range(0, n, block):
        m = min(block, n - b0)
        if r.kind in ("normal", "l2norm"):
            x = _polar_z(u[b0:b0 + m], q[b0:b0 + m], ws)
            if r.kind == "normal":
                if r.b != 1.0:
                    np.multiply(x, _f64(r.b), x)
                np.add(x, _f64(r.a), x)
        else:
            pool = [w[:m] for w in ws.w[:6]]
            c0, c1 = _counters(lo + b0, m, None, pool)
            r0, r1, _, _ = _philox([c0, c1, 0, 0], rk, pool, need=2)
            x = _unit(r0, r1, _F_2M53, ws.u2[:m])
            if r.kind == "int":
                np.multiply(x, _f64(r.b - r.a + 1.0), x)
                np.floor(x, x)
                np.add(x, _f64(r.a), x)
            else:  # uniform, log_gate
                np.multiply(x, _f64(r.b - r.a), x)
                np.add(x, _f64(r.a), x)
        _encode(_finish(r, x, ws), d, plan, codes[lo + b0:lo + b0 + m], ws)


# ---- rounding to the storage dtype and its codes, on the float64 bits -------------------------------
#
# round_to(dtype, x, satfinite) then encode: x is first clipped to +-max (the RNE result of a value
# past max is past it too, and Inf saturates). A magnitude a (the bits of |x|) at or above the
# format's smallest normal rounds RNE at the format's mantissa width by integer steps on a, and
# re-biasing the exponent gives the code: ((a + (half - 1) + lsb) >> (52 - mant)) - ((1022 + emin) <<
# mant). Below it (only computed where some element is there) the code is the count of subnormal
# quanta, rounded by the FPU: bits(|x| + 2^(52 + emin - mant)) - bits(2^(52 + emin - mant)); it is at
# most 2^mant there and at least that where the first formula applies, so max(first, min(second,
# 2^mant)) is the code magnitude. No float subnormal is made (they are slow) and no table or cast
# through ml_dtypes (10-16 ns an element for fp8 and fp4). fp32 is numpy's RNE double -> float cast.

def _encode_plan(d: dtypes.DType) -> dict:
    """_encode's constants for dtype d (0-d arrays)."""
    if not d.is_float:
        return {}
    mant, emin, mx, _, nan_code = _FLOAT[d.name]
    if d.name == "fp64":
        return dict(nan=nan_code)
    sh = 52 - mant
    c = 2.0 ** (52 + emin - mant)
    return dict(mx_lo=_f64(-mx), mx_hi=_f64(mx), nan=nan_code, sh=np.array(sh, np.int64), one=np.array(1, np.int64),
                bias=np.array((1 << (sh - 1)) - 1 - (((1022 + emin) << mant) << sh), np.int64),
                tiny=np.array(np.float64(2.0**emin).view(np.int64), np.int64), c=_f64(c),
                cbits=np.array(np.float64(c).view(np.int64), np.int64), top=np.array(1 << mant, np.int64),
                sign=_u64(d.bits - 1))


_MAG = np.array(0x7FFFFFFFFFFFFFFF, dtype=np.int64)
_U63 = _u64(63)


def _encode(x, d: dtypes.DType, plan, out, ws):
    """The storage codes of round_to(d, x, satfinite) into out (d.codes, x's length); x float64 is
    overwritten."""
    m = x.size
    if not d.is_float:
        np.copyto(out.view(dtypes.storage(d)), x, casting="unsafe")
        return
    nan = ws.mask[:m]
    np.isnan(x, nan)
    if d.name == "fp64":
        np.copyto(out, x.view(np.uint64))
    elif d.name == "fp32":
        np.clip(x, plan["mx_lo"], plan["mx_hi"], x)
        np.copyto(out.view(np.float32), x, casting="same_kind")
    else:
        p = plan
        np.clip(x, p["mx_lo"], p["mx_hi"], x)
        a = ws.w[4][:m].view(np.int64)
        np.bitwise_and(x.view(np.int64), _MAG, a)
        n = ws.w[5][:m].view(np.int64)
        np.right_shift(a, p["sh"], n)
        np.bitwise_and(n, p["one"], n)
        np.add(n, a, n)
        np.add(n, p["bias"], n)
        np.right_shift(n, p["sh"], n)
        if (a < p["tiny"]).any():
            s = ws.w[6][:m].view(np.float64)
            np.add(a.view(np.float64), p["c"], s)
            si = s.view(np.int64)
            np.subtract(si, p["cbits"], si)
            np.minimum(si, p["top"], out=si)
            np.maximum(n, si, out=n)
        sg = a.view(np.uint64)
        np.right_shift(x.view(np.uint64), _U63, sg)
        np.left_shift(sg, p["sign"], sg)
        nu = n.view(np.uint64)
        np.bitwise_or(nu, sg, nu)
        np.copyto(out, nu, casting="unsafe")
    if nan.any():
        out[nan] = plan["nan"]


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


MAX_THREADS = 32


def _threads() -> int:
    env = os.environ.get("ASSAY_RECIPE_THREADS")
    if env:
        return max(1, int(env))
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cpus))


def _special_positions(r: Recipe, n: int, rk):
    """(code value, positions) per special, in injection order: draw k (purpose 1) is at
    floor(u53 * n), a taken position skipped (fixtures/gen/inputs.cpp special_positions). The draws
    are made a batch at a time."""
    total = sum(int(c) for _, c in r.specials)
    out, taken, draws, at, start = [], set(), [], 0, 0
    for s, count in r.specials:
        got = []
        for _ in range(int(count)):
            while True:
                if at == len(draws):
                    k = min(max(2 * (total - len(taken)), 64), 1 << 16)
                    idx = np.arange(start, start + k, dtype=np.uint64)
                    b0, b1, _, _ = _philox([idx & _C_LO, idx >> _C_32, 0, 1], rk, [np.empty(k, np.uint64) for _ in range(4)],
                                           need=2)
                    draws = np.floor(_unit(b0, b1, _F_2M53, np.empty(k)) * float(n)).astype(np.int64).tolist()
                    at, start = 0, start + k
                pos = draws[at]
                at += 1
                if pos not in taken:
                    break
            taken.add(pos)
            got.append(pos)
        out.append((s, got))
    return out


# A recipe of at least this many elements is made with torch on the GPU when torch can see one (and
# device is not given): a GPU-sized input in a fraction of a second instead of many on the CPUs.
AUTO_TORCH_MIN = 1 << 24


def _device(device, r: Recipe, d: dtypes.DType, where: str):
    """The torch device to make r's codes on, or None for numpy. device: None (auto: "cuda" when
    torch is installed and sees a GPU and the input has at least AUTO_TORCH_MIN elements;
    $ASSAY_RECIPE_DEVICE overrides it), "numpy", or a torch device ("cuda", "cuda:1", "cpu")."""
    if device is None:
        device = os.environ.get("ASSAY_RECIPE_DEVICE") or None
    if device is None:
        if r.numel < AUTO_TORCH_MIN or importlib.util.find_spec("torch") is None:
            return None
        import torch

        if not torch.cuda.is_available():
            return None
        device = "cuda"
    if str(device) == "numpy":
        return None
    try:
        from . import _recipe_torch
    except ImportError as e:
        raise AssayError(f"{where}: device {device!r} needs torch ({e})") from None
    return device if _recipe_torch.supports(r, d) else None


def generate_codes(r: Recipe, where: str = "", threads: int | None = None, device=None) -> np.ndarray:
    """The storage codes (unsigned, ``shape``) of the input ``r`` describes, bit-identical to what
    ``assay gen`` made. With numpy (releasing the GIL in its loops) blocks run on ``threads``
    threads (default: the CPUs this process may use, at most MAX_THREADS, or $ASSAY_RECIPE_THREADS),
    each with its own preallocated buffers; with torch (``device`` "cuda" or "cpu"; by default "cuda"
    for a large input when torch sees a GPU, see _device) the same codes are made on that device.
    An integer dtype whose values torch's conversion might not keep goes to numpy. AssayError
    naming ``where`` on a bad recipe."""
    where = where or r.name or r.stream
    d = _check(r, where)
    n = r.numel
    key = stream_key(r.stream, r.seed)
    rk = _round_keys(key)
    codes = np.empty(n, dtype=d.codes)  # written chunk by chunk: no fp64 copy of the whole tensor
    plan = _encode_plan(d)
    dev = _device(device, r, d, where) if n and r.kind != "const" else None
    if n and r.kind == "const":
        x = np.array([r.a], dtype=np.float64)
        if r.scale != 1.0:
            x = x * r.scale
        one = np.empty(1, d.codes)
        _encode(x, d, plan, one, _Work(1, 1))
        codes.fill(one[0])
    elif n and dev is not None:
        from . import _recipe_torch

        _recipe_torch.fill_codes(r, d, key, codes, dev)
    elif n:
        block = BLOCK
        if r.kind == "l2norm" and r.shape and int(r.shape[-1]) > 0:
            row = int(r.shape[-1])
            block = max(1, block // row) * row  # whole rows per block
        block = min(block, n)
        task = block * max(1, TASK // block)
        ntasks = -(-n // task)
        nt = max(1, min(threads or _threads(), ntasks))
        counter = itertools.count()
        errors = []

        def worker():
            try:
                ws = _Work(block, min(task, n))
                while not errors:
                    i = next(counter)  # atomic under the GIL
                    if i >= ntasks:
                        break
                    with np.errstate(all="ignore"):
                        _task(r, d, plan, i * task, min(n, (i + 1) * task), block, rk, ws, codes)
            except BaseException as e:  # re-raised in the calling thread
                errors.append(e)

        if nt == 1:
            worker()
        else:
            pool = [threading.Thread(target=worker, daemon=True) for _ in range(nt)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
        if errors:
            raise errors[0]
    if r.specials:
        for s, pos in _special_positions(r, n, rk):
            if pos:
                codes[np.array(pos, dtype=np.int64)] = _to_codes(np.array([_special_value(s, d)]), d)[0]
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
