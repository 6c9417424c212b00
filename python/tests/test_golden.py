# assay.golden: case fields, storage-dtype inputs (bit-level views), outputs, errors on bad files.
import shutil

import h5py
import ml_dtypes
import numpy as np
import pytest

import assay
from assay import AssayError


def test_scaled_add_fields_and_dtypes(repo):
    g = assay.open(repo / "golden/scaled_add/int_exact.h5")
    assert (g.op, g.case_name, g.level) == ("scaled_add", "int_exact", "L0")
    assert g.case == {"B": 2, "D": 80, "T": 65, "alpha": 0.5, "beta": -2.0}
    assert type(g.case["B"]) is int and type(g.case["alpha"]) is float
    assert g.inputs["x"].dtype == ml_dtypes.bfloat16 and g.input_dtypes["x"] == "bf16"
    assert g.axes["x"] == ("B", "T", "D") and g.axes["out"] == ("B", "T", "D")
    assert g.outputs["out"] == assay.OutputSpec("out", "bf16", (2, 65, 80), ("B", "T", "D"), False)
    assert g.expected["out"].dtype == np.float64 and g.expected["out"].shape == (2, 65, 80)
    assert g.provenance["schema_version"] == 2 and isinstance(g.provenance["seed"], str)
    assert g.provenance["oracle_agreement"][0]["tensor"] == "out"
    with h5py.File(g.path, "r") as f:  # a view of the stored codes, bit for bit
        assert np.array_equal(g.inputs["x"].view(np.uint16), f["inputs/x"][()])


def test_fp32_inputs_are_float32_not_codes(repo):
    g = assay.open(repo / "golden/quant/fake_quant_channel.h5")
    assert g.input_dtypes["dy"] == "fp32"
    dy = g.inputs["dy"]
    assert dy.dtype == np.float32, "fp32 inputs must be float32 values, not uint32 codes"
    with h5py.File(g.path, "r") as f:
        codes = f["inputs/dy"][()]
    assert codes.dtype == np.uint32 and np.array_equal(dy.view(np.uint32), codes)
    assert np.array_equal(g.inputs_f64["dy"], dy.astype(np.float64))
    assert np.abs(dy).max() < 1e6  # values, not 1e9-sized codes


def test_case_field_types(repo):
    g = assay.open(repo / "golden/attention/bwd_fp16_causal_gqa.h5")
    assert g.case["causal"] is True and g.case["sink"] is False
    assert g.case["seqlens_q"] == []  # null dataspace
    assert g.case["window"] == [-1, -1] and all(type(v) is int for v in g.case["window"])
    g = assay.open(repo / "golden/quant/fake_quant_channel.h5")
    assert g.case["elem"] == "e4m3" and g.case["clipped_ste"] is False


def test_every_storage_dtype(goldens):
    seen = {}
    for p in goldens:
        g = assay.open(p)
        for n, a in g.inputs.items():
            seen.setdefault(g.input_dtypes[n], a.dtype)
    want = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32, "fp8e4m3": ml_dtypes.float8_e4m3fn,
            "fp4e2m1": ml_dtypes.float4_e2m1fn, "ue8m0": ml_dtypes.float8_e8m0fnu, "int32": np.int32,
            "uint8": np.uint8, "int64": np.int64}
    for name, dt in want.items():
        assert name in seen, f"no golden input of {name}"
        assert seen[name] == np.dtype(dt), name


def test_intermediates(repo):
    g = assay.open(repo / "golden/optim/lamb_no_clip.h5")
    assert set(g.intermediates) == {"global_grad_norm", "param_norm", "trust_ratio", "update_norm"}
    assert g.intermediates["param_norm"].dtype == np.float64 and g.intermediates["param_norm"].shape == (2,)


def _copy(repo, tmp_path, name="golden/scaled_add/int_exact.h5"):
    p = tmp_path / "g.h5"
    shutil.copy(repo / name, p)
    return p


def test_error_not_hdf5(tmp_path):
    p = tmp_path / "bad.h5"
    p.write_text("not hdf5")
    with pytest.raises(AssayError, match=r"bad\.h5: not an HDF5 file"):
        assay.open(p)
    with pytest.raises(AssayError, match="no such file"):
        assay.open(tmp_path / "missing.h5")
    with pytest.raises(AssayError, match="not a regular file"):
        assay.open(tmp_path)


def test_error_missing_group(repo, tmp_path):
    p = _copy(repo, tmp_path)
    with h5py.File(p, "a") as f:
        del f["expected"]
    with pytest.raises(AssayError, match=r"g\.h5: /expected: missing group"):
        assay.open(p)


def test_error_unknown_dtype(repo, tmp_path):
    p = _copy(repo, tmp_path)
    with h5py.File(p, "a") as f:
        f["inputs/x"].attrs["dtype"] = np.bytes_(b"bf17")
    with pytest.raises(AssayError, match=r"g\.h5: /inputs/x: unknown dtype 'bf17'") as e:
        assay.open(p)
    assert "\n" not in str(e.value)


def test_error_code_width(repo, tmp_path):
    p = _copy(repo, tmp_path)
    with h5py.File(p, "a") as f:
        codes = f["inputs/y"][()]
        del f["inputs/y"]
        f["inputs/y"] = codes.astype(np.uint32)
        f["inputs/y"].attrs["dtype"] = np.bytes_(b"bf16")
    with pytest.raises(AssayError, match=r"g\.h5: /inputs/y: 4-byte integers cannot hold bf16 codes"):
        assay.open(p)


def test_to_torch_bit_exact(repo):
    torch = pytest.importorskip("torch")
    g = assay.open(repo / "golden/quant/nvfp4_torchao.h5")
    t = g.to_torch()
    for n, a in g.inputs.items():
        d = assay.dtypes.get(g.input_dtypes[n])
        if d.name == "fp4e2m1":
            assert t[n].dtype == torch.uint8
        want = a.view(d.codes) if d.is_float else a
        got = t[n].view(torch.uint8 if d.nbytes == 1 else getattr(torch, f"int{8 * d.nbytes}")).numpy()
        assert np.array_equal(got.view(want.dtype), want), n
    g = assay.open(repo / "golden/scaled_add/int_exact.h5")
    x = g.to_torch(names=["x"])["x"]
    assert x.dtype == torch.bfloat16 and np.array_equal(x.float().numpy(), g.inputs["x"].astype(np.float32))


def test_error_truncated(repo, tmp_path):
    p = tmp_path / "t.h5"
    p.write_bytes((repo / "golden/scaled_add/int_exact.h5").read_bytes()[:3000])
    with pytest.raises(AssayError, match=r"t\.h5: (not an HDF5 file|malformed golden)") as e:
        assay.open(p)
    assert "\n" not in str(e.value)


def test_sampled_golden(run_assay, tmp_path):
    # A sampled golden (golden/SCHEMA.md "Sampled outputs"): outputs keep the whole tensor's shape and
    # axes (what a kernel writes), expected values only the sampled elements, in the SCHEMA's order.
    fx = tmp_path / "fixtures"
    fx.mkdir()
    case = ('op = "ssd"\n[[case]]\nname = "s"\nlevel = "L0"\nseed = 3\nB = 2\nT = 20\nH = 2\nP = 4\nN = 8\n'
            'chunk_size = 8\n')
    (fx / "ssd.toml").write_text(case + 'sample = { seqs = [1, 0], heads = [1, 0], tokens = 4 }\n')
    whole = tmp_path / "whole"
    whole.mkdir()
    (whole / "ssd.toml").write_text(case)
    for d in (fx, whole):
        p = run_assay("gen", "--fixtures", d, "--op", "ssd", "--out", d / "out")
        assert p.returncode == 0, p.stderr
    g = assay.Golden(str(fx / "out" / "ssd" / "s.h5"))
    w = assay.Golden(str(whole / "out" / "ssd" / "s.h5"))
    assert g.provenance["schema_version"] == 4
    assert g.sample["seqs"] == [1, 0] and g.sample["heads"] == [1, 0] and g.sample["tokens"] == [0, 6, 13, 19]
    assert w.sample is None
    out = g.outputs["out"]
    assert out.shape == w.outputs["out"].shape == (2, 20, 2, 4) and out.axes == ("B", "T", "H", "P")
    # Slice (b, h) at the sampled tokens, every p: the whole case's values, bit for bit.
    ref = np.concatenate([w.expected["out"][b][g.sample["tokens"], h, :].ravel() for b, h in ((1, 1), (0, 0))])
    assert np.array_equal(g.expected["out"], ref)
    fs = np.concatenate([w.expected["final_states"][b, h].ravel() for b, h in ((1, 1), (0, 0))])
    assert np.array_equal(g.expected["final_states"], fs)
    # The offsets the C++ reader uses, and a candidate written from whole outputs stores only those.
    offs = g.sample_offsets("out")
    assert np.array_equal(w.expected["out"].reshape(-1)[offs], g.expected["out"])
    outs = {n: w.expected[n].astype(np.float32) for n in w.outputs}
    cand = assay.candidate.write(tmp_path / "cand.h5", g, outs)
    with h5py.File(cand) as f:
        assert f["outputs/out"].shape == g.expected["out"].shape
    p = run_assay("compare", fx / "out" / "ssd" / "s.h5", cand, "--fixtures", fx)
    assert p.returncode == 0 and "Passed ssd/s" in p.stdout, p.stdout + p.stderr
