# assay.recipe regenerates inputs bit-identically to the C++ generator (fixtures/gen/inputs.cpp):
# checked against values goldens that build/bin/assay gen writes in a temp dir (every distribution
# kind, every storage dtype a recipe may have), against the committed L0 goldens' inputs (the NaN
# and Inf specials the fixtures use), and by the C++ reader itself (assay inspect regenerates a
# recipe and checks it against the hash Python computed).
import shutil
import tomllib
from pathlib import Path

import h5py
import numpy as np
import pytest

import assay.golden
from assay import dtypes
from assay import recipe as R
from assay.errors import AssayError

CASES = Path(__file__).parent / "data" / "recipe_cases.toml"

# parse_dist's field names and defaults (fixtures/gen/inputs.cpp): kind -> (a field, a default, b field, b default)
DEFAULTS = {"normal": ("mean", 0.0, "std", 1.0), "uniform": ("lo", -1.0, "hi", 1.0), "int": ("lo", -8.0, "hi", 8.0),
            "log_gate": ("lo", -5.0, "hi", 0.0), "const": ("value", 0.0, None, 0.0), "l2norm": (None, 0.0, None, 1.0)}


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def recipe_from_case(case: dict, op: str, name: str, dtype: str, shape, seed: int) -> R.Recipe:
    """The recipe of input `name` from the case text alone (not from the golden): an independent
    statement of what fixtures/gen/inputs.h promises."""
    d = case["dist"][name]
    ka, da, kb, db = DEFAULTS[d["kind"]]
    return R.Recipe(stream=f"{op}/{case['name']}/{name}", seed=seed, kind=d["kind"],
                    a=float(d.get(ka, da)) if ka else da, b=float(d.get(kb, db)) if kb else db,
                    scale=float(d.get("scale", 1.0)),
                    specials=tuple((s["value"], s.get("count", 1)) for s in d.get("specials", [])),
                    dtype=dtype, shape=tuple(shape), name=name)


def compare_golden_inputs(path: str):
    """(matched, mismatches, covered) for every input of a golden whose case gives dist.<name>."""
    matched, bad, covered = 0, [], set()
    with h5py.File(path, "r") as f:
        case = tomllib.loads(_s(f.attrs["case_toml"]))["case"][0]
        op, seed = _s(f.attrs["op"]), int(_s(f.attrs["seed"]))
        for n, ds in f["inputs"].items():
            if not isinstance(ds, h5py.Dataset):  # stored as its recipe: test_decode compares it with the C++ reader
                continue
            d = case.get("dist", {}).get(n)
            if not d or d.get("kind") not in DEFAULTS:
                continue
            dt = dtypes.get(_s(ds.attrs["dtype"]))
            r = recipe_from_case(case, op, n, dt.name, ds.shape, seed)
            got = R.generate_codes(r, threads=2)
            want = ds[()].view(dt.codes)
            if np.array_equal(got, want):
                matched += 1
                covered.add((r.kind, dt.name))
                covered.update(("special", s) for s, _ in r.specials)
            else:
                w = np.nonzero(got.reshape(-1) != want.reshape(-1))[0]
                bad.append(f"{path}: /inputs/{n} ({dt.name} {r.kind}): {w.size} codes differ, first at {w[:3].tolist()}")
    return matched, bad, covered


@pytest.fixture(scope="module")
def generated(tmp_path_factory, run_assay):
    """Values goldens and recipe goldens of the same cases (same case names, so the same streams)."""
    root = tmp_path_factory.mktemp("recipe")
    text = CASES.read_text()
    for kind, extra in (("values", ""), ("recipe", 'inputs = "recipe"\n')):
        fx = root / kind / "fixtures"
        fx.mkdir(parents=True)
        (fx / "scaled_add.toml").write_text(text.replace("[[case]]\n", "[[case]]\n" + extra))
        p = run_assay("gen", "--fixtures", fx, "--op", "scaled_add", "-q", "--out", root / kind / "golden")
        assert p.returncode == 0, p.stdout + p.stderr
    return root


def test_python_regenerates_cpp_inputs_for_every_kind_and_dtype(generated):
    goldens = sorted((generated / "values" / "golden" / "scaled_add").glob("*.h5"))
    assert len(goldens) == 8
    matched, bad, covered = 0, [], set()
    for g in goldens:
        m, b, c = compare_golden_inputs(str(g))
        matched, covered = matched + m, covered | c
        bad += b
    assert not bad, "\n".join(bad)
    assert matched == 16
    kinds = {k for k, _ in covered if k != "special"}
    assert kinds == set(DEFAULTS)
    dts = {d for k, d in covered if k != "special"}
    assert dts == {"bf16", "fp16", "fp32", "fp64", "fp8e4m3", "fp8e5m2", "fp4e2m1", "int32", "int64", "int8", "uint8"}
    specials = {s for k, s in covered if k == "special"}
    assert specials == {"nan", "inf", "-inf", "zero", "-zero", "subnormal", "-subnormal", "max", "-max"}


def test_polar_rejections_are_exercised(generated):
    """The normal tensors above include elements whose first polar attempt was rejected (q >= 1),
    so a regenerator without the rejection loop would have failed the comparison."""
    r = R.Recipe(stream="scaled_add/k_normal_bf16/x", seed=21, kind="normal", a=0.5, b=2.0, scale=0.75, dtype="bf16",
                 shape=(2, 17, 24))
    idx = np.arange(r.numel, dtype=np.uint64)
    r0, r1, r2, r3 = R._block(idx, 0, 0, R.stream_key(r.stream, r.seed))
    u = 2.0 * R._u53(r0, r1) - 1.0
    v = 2.0 * R._u53(r2, r3) - 1.0
    rejected = int(((u * u + v * v) >= 1.0).sum())
    assert rejected > 100  # about 21% of 816


def test_recipe_goldens_read_back_as_the_values_goldens(generated):
    vdir, rdir = generated / "values" / "golden", generated / "recipe" / "golden"
    assert (vdir / "MANIFEST").read_text() == (rdir / "MANIFEST").read_text()
    for vp in sorted((vdir / "scaled_add").glob("*.h5")):
        v = assay.golden.open(vp)
        r = assay.golden.open(rdir / "scaled_add" / vp.name)
        assert r.provenance["schema_version"] == 3 and v.provenance["schema_version"] == 2
        assert set(r.input_recipes) == {"x", "y"} and not v.input_recipes
        with h5py.File(rdir / "scaled_add" / vp.name, "r") as f:
            assert all(isinstance(f["inputs"][n], h5py.Group) for n in ("x", "y"))
        for n in ("x", "y"):
            assert r.inputs[n].dtype == v.inputs[n].dtype
            assert r.inputs[n].shape == v.inputs[n].shape
            d = dtypes.get(v.input_dtypes[n])
            assert np.array_equal(r.inputs[n].view(d.codes), v.inputs[n].view(d.codes)), f"{vp.name}: {n}"
            assert r.axes[n] == v.axes[n]


def test_python_regenerates_the_committed_goldens_inputs(goldens, record_summary):
    matched, bad, covered = 0, [], set()
    for g in goldens:
        m, b, c = compare_golden_inputs(g)
        matched, covered = matched + m, covered | c
        bad += b
    assert not bad, "\n".join(bad)
    assert matched >= 30
    assert {("special", "nan"), ("special", "inf"), ("special", "-inf"), ("l2norm", "bf16"), ("log_gate", "fp32")} <= covered
    record_summary(f"recipe: {matched} committed golden inputs regenerated bit-identically in Python")


NONFINITE_DTYPES = ["bf16", "fp16", "fp32", "fp64", "fp8e4m3", "fp8e5m2", "fp4e2m1"]


def test_cpp_reader_agrees_with_python_on_nonfinite_specials(generated, tmp_path, run_assay):
    """NaN and +-Inf specials in every float dtype (scaled_add cannot make such goldens: its output
    would not be finite). A recipe golden's /inputs/x is edited to each dtype with those specials and
    the hash Python computes for its own regeneration; assay inspect regenerates it in C++ and would
    report it Stale (exit 2) if a single code differed."""
    src = generated / "recipe" / "golden" / "scaled_add" / "k_normal_bf16.h5"
    for dt in NONFINITE_DTYPES:
        p = tmp_path / f"{dt}.h5"
        shutil.copyfile(src, p)
        r = R.Recipe(stream="scaled_add/k_normal_bf16/x", seed=21, kind="normal", a=0.5, b=2.0, scale=1e6 if dt != "fp64" else 1.0,
                     specials=(("nan", 3), ("inf", 2), ("-inf", 2), ("max", 1)), dtype=dt, shape=(2, 17, 24))
        codes = R.generate_codes(r)
        with h5py.File(p, "r+") as f:
            x = f["inputs/x"]
            x.attrs["dtype"] = np.bytes_(dt.encode())
            x.attrs["dist_scale"] = r.scale
            x.attrs["specials"] = np.bytes_(b'[{"value":"nan","count":3},{"value":"inf","count":2},'
                                            b'{"value":"-inf","count":2},{"value":"max","count":1}]')
            x.attrs["fnv1a64"] = np.bytes_(R.input_hash("x", dt, r.shape, codes).encode())
        out = run_assay("inspect", p)
        assert out.returncode == 0, f"{dt}: C++ regenerates other codes than Python: {out.stderr}"
        assert np.array_equal(assay.golden.open(p).inputs["x"].view(dtypes.get(dt).codes), codes)
    # And the check can fail: one code off in the hashed array is Stale, one line naming file and dataset.
    codes = codes.copy()
    codes.reshape(-1)[5] ^= 1
    with h5py.File(p, "r+") as f:
        f["inputs/x"].attrs["fnv1a64"] = np.bytes_(R.input_hash("x", dt, codes.shape, codes).encode())
    out = run_assay("inspect", p)
    assert out.returncode == 2
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("Stale:")]
    assert len(line) == 1 and f"{p}: /inputs/x: regenerated from its recipe" in line[0]


def test_an_edited_recipe_is_stale_in_python_too(generated, tmp_path):
    p = tmp_path / "edited.h5"
    shutil.copyfile(generated / "recipe" / "golden" / "scaled_add" / "k_uniform_fp16.h5", p)
    with h5py.File(p, "r+") as f:
        f["inputs/x"].attrs["dist_b"] = 60000.0
    g = assay.golden.open(p)
    g.inputs["y"]  # untouched: fine
    with pytest.raises(AssayError, match=r"edited\.h5: /inputs/x: regenerated from its recipe, the codes hash to [0-9a-f]{16} "
                                         r"but the golden recorded [0-9a-f]{16}"):
        g.inputs["x"]
    with h5py.File(p, "r+") as f:
        f["inputs/x"].attrs["dist_kind"] = np.bytes_(b"cauchy")
    with pytest.raises(AssayError, match=r"edited\.h5: /inputs/x: attribute dist_kind: unknown distribution 'cauchy'"):
        assay.golden.open(p).inputs["x"]


def test_philox_known_answers():
    """Random123's known-answer vectors (as fixtures/tests/test_rng.cpp)."""
    got = R.philox4x32_10(np.array([0], np.uint32), 0, 0, 0, (0, 0))
    assert [int(c[0]) for c in got] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    got = R.philox4x32_10(np.array([0x243F6A88], np.uint32), 0x85A308D3, 0x13198A2E, 0x03707344, (0xA4093822, 0x299F31D0))
    assert [int(c[0]) for c in got] == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]
