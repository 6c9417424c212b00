# assay._recipe_torch: assay.recipe's generator in torch (CUDA, or CPU for the tests), the same codes
# bit for bit. Integers: every 32-bit word in an int64 tensor, and the Philox products 32 x 32 -> 64
# from 16-bit halves (no product reaches 2^63: no signed overflow). Floats: float64 tensors, one
# eager op per C++ operation in the C++ order (an op is its own kernel: nothing is fused, no FMA;
# division is IEEE's on CPU and CUDA, and so is CUDA's sqrt, but not torch's CPU one: see _sqrt);
# the log and the rounding are recipe.py's integer steps on the fp64 bits (Tensor.view). An l2norm row's sum of squares is a
# loop over its columns, sequential as the C++ loop (torch.cumsum is a parallel scan on CUDA).
"""torch backend of assay.recipe.generate_codes (device="cuda" or "cpu")."""
from __future__ import annotations

import numpy as np
import torch

from . import recipe as R

_MASK32 = 0xFFFFFFFF
_SPLIT = [(m >> 16, m & 0xFFFF) for m in (R._M0, R._M1)]

# Elements per block: CUDA blocks are large (about 1.9 GiB of temporaries at 2^24; 2^22 took 1.7-2x as long
# on an H200, the rejection loop's small launches per block), CPU ones stay in cache.
BLOCK = {"cuda": 1 << 24, "cpu": 1 << 16}


def _mul32(c, which: int):
    """(hi, lo) of c * M (c: int64 tensor of 32-bit values, or an int) from 16-bit halves."""
    mh, ml = _SPLIT[which]
    if isinstance(c, int):
        p = c * ((mh << 16) | ml)
        return p >> 32, p & _MASK32
    ch, cl = c >> 16, c & 0xFFFF
    mid = ch * ml + cl * mh  # < 2^33
    lo = cl * ml + ((mid & 0xFFFF) << 16)  # < 2^33
    return ch * mh + (mid >> 16) + (lo >> 32), lo & _MASK32


def philox(c0, c1, c2, c3, key):
    """Philox4x32-10 of int64 tensors (or ints) holding 32-bit words."""
    k0, k1 = key
    for rnd in range(10):
        if rnd:
            k0, k1 = (k0 + R._W0) & _MASK32, (k1 + R._W1) & _MASK32
        hi0, lo0 = _mul32(c0, 0)
        hi1, lo1 = _mul32(c2, 1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def _unit(hi, lo):
    """(hi << 21) | (lo >> 11) as float64 (< 2^53: exact)."""
    return ((hi << 21) | (lo >> 11)).to(torch.float64)


def _uq(idx, attempt: int, key):
    r0, r1, r2, r3 = philox(idx & _MASK32, idx >> 32, attempt, 0, key)
    u = torch.sub(torch.mul(_unit(r0, r1), 2.0**-52), 1.0)  # 2 u53 - 1, exactly
    v = torch.sub(torch.mul(_unit(r2, r3), 2.0**-52), 1.0)
    q = torch.add(torch.mul(u, u), torch.mul(v, v))
    return u, q, torch.logical_not(torch.logical_and(q > 0.0, q < 1.0))


def _neg2log(q):
    """-2 * portable_log(q) for q in (0, 1): recipe._neg2log's steps."""
    qb = q.view(torch.int64)
    k = torch.bitwise_right_shift(torch.sub(qb, 0x3FE6A09E667F3BCD), 52)
    m = torch.sub(qb, torch.bitwise_left_shift(k, 52)).view(torch.float64)
    e = k.to(torch.float64)
    s = torch.div(torch.sub(m, 1.0), torch.add(m, 1.0))
    s2 = torch.mul(s, s)
    poly = torch.mul(s2, R._INV_ODD[15])
    for j in range(14, 0, -1):
        poly = torch.mul(torch.add(poly, R._INV_ODD[j]), s2)
    s = torch.mul(s, -4.0)
    poly = torch.add(torch.mul(poly, s), s)
    poly = torch.add(poly, torch.mul(e, -2.0 * R._LN2_LO))
    return torch.add(torch.mul(e, -2.0 * R._LN2_HI), poly)


def _sqrt(x):
    """Correctly rounded sqrt: CUDA's double sqrt is IEEE's (0 ulp), torch's CPU one is MKL's (670
    of 100,000 random values one ulp off), so on the CPU numpy's (the instruction) on the same memory."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.sqrt(x.contiguous().numpy()))
    return torch.sqrt(x)


def _std_normal(idx, key):
    u, q, bad = _uq(idx, 0, key)
    pos = bad.nonzero().squeeze(1)
    attempt = 1
    while pos.numel():
        uk, qk, badk = _uq(idx[pos], attempt, key)
        u[pos], q[pos] = uk, qk
        pos = pos[badk]
        attempt += 1
    return torch.mul(u, _sqrt(torch.div(_neg2log(q), q)))


def _values(r: R.Recipe, lo: int, hi: int, key, dev):
    idx = torch.arange(lo, hi, dtype=torch.int64, device=dev)
    if r.kind in ("normal", "l2norm"):
        x = _std_normal(idx, key)
        if r.kind == "normal":
            x = torch.add(torch.mul(x, r.b), r.a)
        elif r.shape and int(r.shape[-1]) > 0:
            v = x.view(-1, int(r.shape[-1]))
            ss = torch.zeros(v.shape[0], dtype=torch.float64, device=dev)
            for j in range(v.shape[1]):  # sequential, as the C++ loop
                ss = torch.add(ss, torch.mul(v[:, j], v[:, j]))
            x = torch.mul(v, torch.div(1.0, _sqrt(ss))[:, None]).reshape(-1)
    else:
        r0, r1, _, _ = philox(idx & _MASK32, idx >> 32, 0, 0, key)
        u = torch.mul(_unit(r0, r1), 2.0**-53)
        if r.kind == "int":
            x = torch.add(torch.floor(torch.mul(u, r.b - r.a + 1.0)), r.a)
        else:  # uniform, log_gate
            x = torch.add(torch.mul(u, r.b - r.a), r.a)
    if r.scale != 1.0:
        x = torch.mul(x, r.scale)
    return x


_TORCH_CODES = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32, 8: torch.int64}
_TORCH_INT = {"int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "uint32": torch.uint32,
              "int64": torch.int64}


def _encode(x, d):
    """The storage codes of round_to(d, x, satfinite), as recipe._encode makes them."""
    if not d.is_float:
        return x.to(torch.int64).to(_TORCH_INT[d.name])
    mant, emin, mx, _, nan_code = R._FLOAT[d.name]
    nan = torch.isnan(x)
    if d.name == "fp64":
        code = x.view(torch.int64).clone()
    elif d.name == "fp32":
        code = torch.clamp(x, -mx, mx).to(torch.float32).view(torch.int32).to(torch.int64) & _MASK32
    else:
        x = torch.clamp(x, -mx, mx)
        xb = x.view(torch.int64)
        a = xb & 0x7FFFFFFFFFFFFFFF
        sh = 52 - mant
        bias = (1 << (sh - 1)) - 1 - (((1022 + emin) << mant) << sh)
        n = (((a >> sh) & 1) + a + bias) >> sh
        tiny = int(np.float64(2.0**emin).view(np.int64))
        if bool((a < tiny).any()):
            c = 2.0 ** (52 + emin - mant)
            s = torch.add(a.view(torch.float64), c).view(torch.int64) - int(np.float64(c).view(np.int64))
            n = torch.maximum(n, torch.clamp(s, max=1 << mant))
        code = n | (((xb >> 63) & 1) << (d.bits - 1))
    code = torch.where(nan, torch.full_like(code, nan_code if nan_code < 1 << 63 else nan_code - (1 << 64)), code)
    return code.to(_TORCH_CODES[d.nbytes])


def supports(r: R.Recipe, d) -> bool:
    """Whether this backend makes r's codes (an integer dtype: only values its conversion keeps exact)."""
    if d.is_float:
        return True
    lo, hi = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1),
              "int64": (-2**63, 2**63 - 1)}[d.name]
    if r.kind == "const":
        ends = [r.a * r.scale] if r.scale != 1.0 else [r.a]
    else:  # int: a + floor(u * (b - a + 1)) in [a, b + 1], then the scale
        ends = [r.a * r.scale, (r.b + 1.0) * r.scale] if r.scale != 1.0 else [r.a, r.b + 1.0]
    return all(np.isfinite(e) and lo <= e <= hi for e in ends) and max(abs(e) for e in ends) < 2.0**53


def fill_codes(r: R.Recipe, d, key, codes: np.ndarray, device) -> None:
    """codes (flat, d.codes) of r, made on the torch device a block at a time."""
    dev = torch.device(device)
    n = codes.size
    block = BLOCK.get(dev.type, BLOCK["cuda"])
    if r.kind == "l2norm" and r.shape and int(r.shape[-1]) > 0:
        row = int(r.shape[-1])
        block = max(1, block // row) * row
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        c = _encode(_values(r, lo, hi, key, dev), d).cpu().numpy()
        codes[lo:hi] = c.view(d.codes)
