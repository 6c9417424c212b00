# Bit-for-bit agreement of the Python decoding (ml_dtypes views -> float64) with the C++ codecs
# (reference/core/dtype.h) on every committed golden, through `assay inspect GOLDEN --decode OUT.h5`.
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest

import assay
from conftest import subcommand_has


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Identical float64 bit patterns, except that any NaN equals any NaN (-0.0 != 0.0)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a.view(np.uint64)[~na], b.view(np.uint64)[~nb]))


def test_bits_equal_rule():
    assert _bits_equal(np.array([np.nan, 1.0]), np.array([-np.nan, 1.0]))
    assert not _bits_equal(np.array([0.0]), np.array([-0.0]))
    assert not _bits_equal(np.array([np.nan]), np.array([0.0]))


def test_decode_matches_cpp_on_every_golden(goldens, run_assay, tmp_path, record_summary):
    if not subcommand_has(run_assay, "inspect", "--decode"):
        pytest.fail("this assay binary has no `inspect --decode` (rebuild: scripts/test)")

    # A few batched calls in parallel: `inspect A.h5 B.h5 ... --decode DIR` writes DIR/<op>/<case>.h5.
    n_chunks = max(2, min(8, os.cpu_count() or 2))
    chunks = [goldens[k::n_chunks] for k in range(n_chunks) if len(goldens[k::n_chunks]) > 1]
    left = [g for g in goldens if not any(g in c for c in chunks)]

    def decode(k_chunk):
        k, chunk = k_chunk
        out = tmp_path / (f"d{k}.h5" if len(chunk) == 1 else f"d{k}")  # one golden: --decode names the file
        p = run_assay("inspect", *chunk, "--decode", out)
        assert p.returncode == 0, f"assay inspect --decode exited {p.returncode}: {p.stderr.strip()}"
        if len(chunk) == 1:
            return [(chunk[0], out)]
        return [(path, out / Path(path).parent.name / Path(path).name) for path in chunk]

    with ThreadPoolExecutor(max_workers=len(chunks) + len(left)) as ex:
        jobs = list(enumerate(chunks)) + [(len(chunks) + i, [g]) for i, g in enumerate(left)]
        decoded = [pair for pairs in ex.map(decode, jobs) for pair in pairs]
    for path, out in decoded:
        assert out.is_file(), f"{path}: assay inspect --decode wrote no {out}"

    n_inputs = n_elems = 0
    bad = []
    for path, out in decoded:
        g = assay.open(path)
        with h5py.File(out, "r") as f:
            assert set(f["inputs"]) == set(g.inputs), path
            assert set(f["expected"]) == set(g.expected), path
            for n, a in g.inputs_f64.items():
                if not _bits_equal(a, f["inputs"][n][()]):
                    bad.append(f"{path}: /inputs/{n} ({g.input_dtypes[n]})")
                n_inputs += 1
                n_elems += a.size
            for n, a in g.expected.items():
                if not _bits_equal(a, f["expected"][n][()]):
                    bad.append(f"{path}: /expected/{n}")
                n_elems += a.size
    assert not bad, f"{len(bad)} tensors decode differently from C++: " + "; ".join(bad[:10])
    assert len(decoded) == len(goldens)
    line = f"decoded {len(decoded)} goldens, {n_inputs} inputs, {n_elems} elements bit-identical to the C++ codecs"
    print(line)
    record_summary(line)


def _decode_by_definition(name: str, code: int) -> float:
    """The value of one code from the format's fields (reference/core/dtype.cpp's kInfo table)."""
    import math

    e_bits, m_bits, bias, ieee, has_sign = {"bf16": (8, 7, 127, True, True), "fp16": (5, 10, 15, True, True),
                                            "fp8e4m3": (4, 3, 7, False, True), "fp8e5m2": (5, 2, 15, True, True),
                                            "fp4e2m1": (2, 1, 1, False, True), "ue8m0": (8, 0, 127, False, False)}[name]
    nbits = e_bits + m_bits + has_sign
    sign = -1.0 if has_sign and code >> (nbits - 1) & 1 else 1.0
    e, m = code >> m_bits & ((1 << e_bits) - 1), code & ((1 << m_bits) - 1)
    if name == "ue8m0":
        return math.nan if e == 0xFF else math.ldexp(1.0, e - bias)
    if ieee and e == (1 << e_bits) - 1:
        return sign * math.inf if m == 0 else math.nan
    if name == "fp8e4m3" and e == 15 and m == 7:
        return math.nan
    if e == 0:
        return sign * math.ldexp(m, 1 - bias - m_bits)
    return sign * math.ldexp((1 << m_bits) + m, e - bias - m_bits)


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp8e4m3", "fp8e5m2", "fp4e2m1", "ue8m0"])
def test_every_code_decodes_as_defined(name):
    d = assay.dtypes.get(name)
    n = 1 << d.bits
    got = assay.dtypes.to_float64(assay.dtypes.view_codes(np.arange(n, dtype=d.codes), d))
    want = np.array([_decode_by_definition(name, c) for c in range(n)])
    assert _bits_equal(got, want), name
