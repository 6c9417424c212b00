# assay.candidate.write: refusals (one line, no file written), and round trips judged by the C++
# `assay compare` (Passed for the expected values rounded to the output dtype, Incorrect when perturbed).
import json
import os
import shutil
import stat
from pathlib import Path

import h5py
import ml_dtypes
import numpy as np
import pytest

import assay
from assay import AssayError
from assay.candidate import codes, write


@pytest.fixture
def sa(repo):
    return assay.open(repo / "golden/scaled_add/int_exact.h5")  # out: bf16 (2, 65, 80)


@pytest.fixture
def q(repo):
    return assay.open(repo / "golden/quant/mxfp8_e4m3_rceil.h5")  # q_row fp8e4m3, scale_row ue8m0, xhat fp32


def _rounded(g):
    """The golden's expected values rounded to each output's storage dtype (RNE, ml_dtypes)."""
    out = {}
    for n, o in g.outputs.items():
        d = assay.dtypes.get(o.dtype)
        out[n] = g.expected[n].astype(d.numpy) if d.is_float and d.name != "fp64" else g.expected[n]
    return out


def _refused(tmp_path, golden, outputs, match, **kw):
    path = tmp_path / "sub" / "cand.h5"
    with pytest.raises(AssayError, match=match) as e:
        write(path, golden, outputs, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    assert not path.exists() and not (tmp_path / "sub").exists()
    assert not list(tmp_path.rglob("*.tmp.*"))
    return msg


def test_refuses_unknown_output(tmp_path, sa):
    out = _rounded(sa)
    out["foo"] = out["out"]
    _refused(tmp_path, sa, out, r"output 'foo' is not an output of golden scaled_add/int_exact \(outputs: out\)")


def test_refuses_missing_output(tmp_path, q):
    out = _rounded(q)
    del out["scale_row"]
    _refused(tmp_path, q, out, r"output 'scale_row' of golden quant/mxfp8_e4m3_rceil is missing")


def test_refuses_wrong_shape(tmp_path, sa):
    _refused(tmp_path, sa, {"out": np.zeros((2, 65, 81))},
             r"output 'out': wrong shape \(2, 65, 81\) \(golden out \(2, 65, 80\)\)")


def test_refuses_wrong_dtype(tmp_path, sa, q):
    e = sa.expected["out"]
    _refused(tmp_path, sa, {"out": e.astype(ml_dtypes.float8_e4m3fn)},
             r"output 'out': wrong dtype float8_e4m3fn \(golden output 'out' is bf16\)")
    _refused(tmp_path, sa, {"out": e.astype(np.int32)}, r"wrong dtype int32 \(golden output 'out' is bf16; pass raw codes")
    _refused(tmp_path, sa, {"out": e.astype(np.complex128)}, r"wrong dtype complex128")
    _refused(tmp_path, sa, {"out": e > 0}, r"wrong dtype bool")
    _refused(tmp_path, sa, {"out": e.astype(object)}, r"wrong dtype object")
    out = _rounded(q)
    out["q_row"] = q.expected["q_row"].astype(ml_dtypes.float8_e5m2)  # an e5m2 array for an e4m3 output
    _refused(tmp_path, q, out, r"output 'q_row': wrong dtype float8_e5m2 \(golden output 'q_row' is fp8e4m3\)")
    out = _rounded(q)
    out["q_row"] = codes(out["q_row"].view(np.uint8).astype(np.uint16), "fp8e4m3")
    _refused(tmp_path, q, out, r"output 'q_row': 2-byte integers cannot hold fp8e4m3 codes")
    out = _rounded(q)
    out["q_row"] = codes(out["q_row"].view(np.uint8), "bf16")
    _refused(tmp_path, q, out, r"output 'q_row': wrong dtype bf16 codes \(golden output 'q_row' is fp8e4m3\)")


def test_refuses_bad_fp4_codes_and_intermediates(tmp_path, repo):
    g = assay.open(repo / "golden/quant/nvfp4_sixth_fold_witness.h5")
    out = _rounded(g)
    c = out["q_row"].view(np.uint8).copy()
    c.reshape(-1)[3] = 0x13
    out["q_row"] = codes(c, "fp4e2m1")
    _refused(tmp_path, g, out, r"output 'q_row': element 3 holds 0x13, not a fp4e2m1 code")
    _refused(tmp_path, g, _rounded(g), r"intermediate 'nope' is not an intermediate of golden quant/nvfp4_sixth_fold_witness",
             intermediates={"nope": np.zeros(1)})
    _refused(tmp_path, g, _rounded(g), r"intermediate 's_dec_row': wrong shape \(2,\) \(golden s_dec_row \(1,\)\)",
             intermediates={"s_dec_row": np.zeros(2)})


def _compare(run_assay, golden, cand):
    p = run_assay("compare", golden.path, cand, "--json")
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def test_round_trip_bf16(tmp_path, sa, run_assay):
    cand = tmp_path / "a" / "b" / "cand.h5"
    write(cand, sa, _rounded(sa), precision_profile="strict")
    assert cand.is_file() and not list(tmp_path.rglob("*.tmp.*"))
    with h5py.File(cand, "r") as f:
        assert f["outputs/out"].dtype == np.float32  # bf16 upcast, exact
        assert f.attrs["precision_profile"] in ("strict", b"strict")
    rc, js = _compare(run_assay, sa, cand)
    assert (rc, js["verdict"], js["profile"]) == (0, "Passed", "strict")
    bad = _rounded(sa)
    bad["out"] = (bad["out"].astype(np.float32) * 1.5).astype(ml_dtypes.bfloat16)
    write(cand, sa, bad)
    rc, js = _compare(run_assay, sa, cand)
    assert (rc, js["verdict"]) == (1, "Incorrect")


def test_round_trip_codes(tmp_path, q, run_assay):
    """fp8 and ue8m0 outputs as ml_dtypes arrays and as raw codes (signed storage too)."""
    cand = tmp_path / "cand.h5"
    write(cand, q, _rounded(q))
    with h5py.File(cand, "r") as f:
        assert f["outputs/q_row"].dtype == np.uint8 and f["outputs/q_row"].attrs["dtype"] in ("fp8e4m3", b"fp8e4m3")
        assert f["outputs/scale_row"].attrs["dtype"] in ("ue8m0", b"ue8m0")
    assert _compare(run_assay, q, cand)[1]["verdict"] == "Passed"
    out = _rounded(q)
    out["q_row"] = codes(out["q_row"].view(np.int8), "fp8e4m3")
    out["xhat_row"] = codes(out["xhat_row"].view(np.uint32), "fp32")
    write(cand, q, out)
    assert _compare(run_assay, q, cand)[1]["verdict"] == "Passed"
    out = _rounded(q)
    out["q_row"] = (out["q_row"].astype(np.float32) * 1.5).astype(ml_dtypes.float8_e4m3fn)
    write(cand, q, out)
    rc, js = _compare(run_assay, q, cand)
    assert (rc, js["verdict"]) == (1, "Incorrect")
    assert {t["name"]: t["verdict"] for t in js["tensors"]}["q_row"] != "Passed"


def test_every_golden_round_trips(tmp_path, repo, run_assay, record_summary):
    """One golden per op: the expected values rounded to the output dtypes pass (with the writer's
    float64 / float32 / fp16 / bf16 / fp8 / fp4 / ue8m0 / integer paths)."""
    names = ["scaled_add/specials_fp16", "scaled_add/normal_odd_shape", "quant/nvfp4_1d_specials",
             "quant/mxfp4_floor", "quant/swizzle_ragged", "optim/lamb_no_clip"]
    for n in names:
        g = assay.open(repo / f"golden/{n}.h5")
        cand = tmp_path / f"{n.replace('/', '_')}.h5"
        write(cand, g, _rounded(g))
        rc, js = _compare(run_assay, g, cand)
        assert (rc, js["verdict"]) == (0, "Passed"), (n, js)
    record_summary(f"candidate round trip: {len(names) + 2} goldens Passed through assay compare")


def test_no_temp_file_left_and_replace(tmp_path, sa):
    cand = tmp_path / "cand.h5"
    cand.write_text("old")
    write(cand, sa, _rounded(sa))
    assert h5py.is_hdf5(cand)
    assert os.listdir(tmp_path) == ["cand.h5"]


def test_torch_outputs(tmp_path, sa, q, run_assay):
    torch = pytest.importorskip("torch")
    cand = tmp_path / "cand.h5"
    write(cand, sa, {"out": torch.from_numpy(sa.expected["out"]).to(torch.bfloat16)})
    assert _compare(run_assay, sa, cand)[1]["verdict"] == "Passed"
    out = {n: torch.from_numpy(np.ascontiguousarray(q.expected[n])) for n in q.outputs}
    out["q_row"] = out["q_row"].to(torch.float8_e4m3fn)
    out["q_col"] = out["q_col"].to(torch.float8_e4m3fn)
    if hasattr(torch, "float8_e8m0fnu"):
        out["scale_row"] = codes(torch.from_numpy(_rounded(q)["scale_row"].view(np.uint8)), "ue8m0")
        out["scale_col"] = codes(torch.from_numpy(_rounded(q)["scale_col"].view(np.uint8)), "ue8m0")
    write(cand, q, out)
    assert _compare(run_assay, q, cand)[1]["verdict"] == "Passed"
    with pytest.raises(AssayError, match="wrong dtype"):
        write(cand, sa, {"out": torch.zeros(2, 65, 80, dtype=torch.complex64)})


def test_refuses_an_output_path_that_is_not_a_regular_file(tmp_path, sa):
    """A directory, FIFO, symlink or device at the candidate's path is refused, never replaced."""
    d = tmp_path / "dir.h5"
    d.mkdir()
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)
    target = tmp_path / "target.h5"
    target.write_text("keep")
    link = tmp_path / "link.h5"
    link.symlink_to(target)
    dev_null = Path("/dev/null")
    for p, kind in ((d, "a directory"), (fifo, "a FIFO"), (link, "a symlink"), (dev_null, "a character device")):
        with pytest.raises(AssayError, match=f"exists and is {kind}, not a regular file") as e:
            write(p, sa, _rounded(sa))
        assert str(e.value).startswith(f"{p}: ") and "\n" not in str(e.value)
    assert d.is_dir() and not os.listdir(d) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert link.is_symlink() and target.read_text() == "keep" and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not list(tmp_path.rglob("*.tmp.*")) and not list(Path("/dev").glob("null.tmp.*"))


def test_refuses_to_overwrite_the_golden(tmp_path, repo):
    """The golden being judged is never the candidate: by its own path, a hard link, a symlinked
    directory or a path with '..'."""
    gp = tmp_path / "g.h5"
    shutil.copy(repo / "golden/scaled_add/int_exact.h5", gp)
    g = assay.open(gp)
    before = gp.read_bytes()
    os.link(gp, tmp_path / "hard.h5")
    (tmp_path / "via").symlink_to(tmp_path)
    for p in (gp, tmp_path / "hard.h5", tmp_path / "via" / "g.h5", tmp_path / "nodir" / ".." / "g.h5"):
        with pytest.raises(AssayError, match=f"is the golden {gp} being judged") as e:
            write(p, g, _rounded(g))
        assert str(e.value).startswith(f"{p}: ")
    assert gp.read_bytes() == before and not (tmp_path / "nodir").exists()
    assert not list(tmp_path.rglob("*.tmp.*"))
