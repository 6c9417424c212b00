# assay.recipe regenerates inputs bit-identically to the C++ generator (fixtures/gen/inputs.cpp):
# checked against values goldens that build/bin/assay gen writes in a temp dir (every distribution
# kind, every storage dtype a recipe may have), against the committed L0 goldens' inputs (the NaN
# and Inf specials the fixtures use), and by the C++ reader itself (assay inspect regenerates a
# recipe and checks it against the hash Python computed); the same cases at 301,000 elements an
# input, so that assay.recipe's blocks, tasks and threads all take part; and the fast path's pieces
# (counters across 2^32, the integer-reduced log, the integer rounding) against plain statements.
import logging
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


def compare_golden_inputs(path: str, threads: int = 2, device: str = "numpy"):
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
            got = R.generate_codes(r, threads=threads, device=device)
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


def check_every_kind_and_dtype(golden_dir: Path, threads: int = 2, device: str = "numpy"):
    goldens = sorted((golden_dir / "scaled_add").glob("*.h5"))
    assert len(goldens) == 8
    matched, bad, covered = 0, [], set()
    for g in goldens:
        m, b, c = compare_golden_inputs(str(g), threads, device)
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


def test_python_regenerates_cpp_inputs_for_every_kind_and_dtype(generated):
    check_every_kind_and_dtype(generated / "values" / "golden")


# The same cases at 4 x 301 x 250 = 301,000 elements an input: many of assay.recipe's blocks
# (recipe.BLOCK) and two of its tasks (recipe.TASK), so the polar method's rejected elements are
# redone over a task and its last, batched passes run; l2norm rows of 250 split into blocks of whole rows.
BIG = {"B": (2, 4), "T": (17, 301), "D": (24, 250)}


@pytest.fixture(scope="module")
def generated_big(tmp_path_factory, run_assay):
    root = tmp_path_factory.mktemp("recipe_big")
    text = CASES.read_text()
    for k, (small, big) in BIG.items():
        assert text.count(f"\n{k} = {small}\n") == 8
        text = text.replace(f"\n{k} = {small}\n", f"\n{k} = {big}\n")
    fx = root / "fixtures"
    fx.mkdir()
    (fx / "scaled_add.toml").write_text(text)
    p = run_assay("gen", "--fixtures", fx, "--op", "scaled_add", "-q", "--out", root / "golden")
    assert p.returncode == 0, p.stdout + p.stderr
    return root / "golden"


@pytest.mark.parametrize("threads", [1, 3])
def test_python_regenerates_large_cpp_inputs_for_every_kind_and_dtype(generated_big, threads):
    assert (BIG["B"][1] * BIG["T"][1] * BIG["D"][1]) > R.TASK > 4 * R.BLOCK
    check_every_kind_and_dtype(generated_big, threads)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_regenerates_large_cpp_inputs_for_every_kind_and_dtype(generated_big, device):
    """The torch path (assay._recipe_torch) makes the same codes as C++ (and so as numpy, checked
    above on the same goldens): the three agree. CPU torch runs wherever torch imports."""
    torch = pytest.importorskip("torch")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    check_every_kind_and_dtype(generated_big, device=device)


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


def test_regeneration_time_is_logged(generated, caplog):
    """Each recipe input regenerated logs one INFO line on the "assay" logger naming it, with its
    element count and seconds (python/README.md "Phase times"); an input held as values logs none."""
    vp = sorted((generated / "recipe" / "golden" / "scaled_add").glob("*.h5"))[0]
    with caplog.at_level(logging.INFO, logger="assay"):
        g = assay.golden.open(vp)
        for n in ("x", "y"):
            g.inputs[n]
            g.inputs[n]  # the second access reuses the codes: no second line
        assay.golden.open(generated / "values" / "golden" / "scaled_add" / vp.name).inputs["x"]
    lines = [r.getMessage() for r in caplog.records if r.name == "assay"]
    assert len(lines) == 2, lines
    for n, line in zip(("x", "y"), lines):
        assert f"/inputs/{n}: regenerated from its recipe ({g.inputs[n].size} " in line and line.endswith(" s")


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


# ---- the fast path's pieces against their plain statements ------------------------------------------

def _polar_reference(key, idx):
    """u, q of the accepted polar attempt per element, Philox called through philox4x32_10 (every
    counter word an array) attempt by attempt."""
    u, q, todo, attempt = np.empty(idx.size), np.empty(idx.size), np.arange(idx.size), 0
    while todo.size:
        i = idx[todo]
        r = R.philox4x32_10((i & np.uint64(0xFFFFFFFF)).astype(np.uint32), (i >> np.uint64(32)).astype(np.uint32), attempt, 0, key)
        uu, vv = 2.0 * R._u53(r[0], r[1]) - 1.0, 2.0 * R._u53(r[2], r[3]) - 1.0
        qq = uu * uu + vv * vv
        u[todo], q[todo] = uu, qq
        todo = todo[~((qq > 0.0) & (qq < 1.0))]
        attempt += 1
    return u, q


class _Window:
    """codes[lo:hi] of a tensor whose elements from `base` on are held (a 2^32-element one is not)."""

    def __init__(self, a, base):
        self.a, self.base = a, base

    def __getitem__(self, s):
        return self.a[s.start - self.base:s.stop - self.base]


@pytest.mark.parametrize("kind", ["normal", "uniform"])
def test_indices_across_a_high_word_boundary(kind):
    """Elements 2^32 - 3000 .. 2^32 + 2999: blocks whose high counter word changes inside them (the
    fast path keeps it as an int where it is one value) agree with Philox called per element."""
    key = R.stream_key("straddle/x", 5)
    lo, n, block = 2**32 - 3000, 6000, 4096
    r = R.Recipe(stream="straddle/x", seed=5, kind=kind, a=-1.0, b=1.0, scale=1.0, dtype="fp64", shape=(2**33,))
    ws = R._Work(block, n)
    codes = np.empty(n, np.uint64)
    with np.errstate(all="ignore"):
        R._task(r, dtypes.get("fp64"), R._encode_plan(dtypes.get("fp64")), lo, lo + n, block, R._round_keys(key), ws,
                _Window(codes, lo))
    idx = np.arange(lo, lo + n, dtype=np.uint64)
    if kind == "normal":
        u, q = _polar_reference(key, idx)
        want = -1.0 + 1.0 * (u * np.sqrt(-2.0 * R.portable_log(q) / q))  # mean -1, std 1
    else:
        b = R._block(idx, 0, 0, key)
        want = -1.0 + 2.0 * R._u53(b[0], b[1])
    assert np.array_equal(codes, want.view(np.uint64))


def test_fast_log_is_portable_log():
    """_neg2log (integer frexp, -2 folded into the constants) is -2 * portable_log bit for bit on (0, 1):
    random q, the sqrt(1/2) boundary of the reduction, powers of two, the smallest and largest q."""
    c = 0.70710678118654752440
    edges = [2.0**-104, 2.0**-53, 0.25, 0.5, 1.0 - 2.0**-53, c, np.nextafter(c, 0.0), np.nextafter(c, 1.0), c / 2,
             np.nextafter(c / 2, 0.0), 2 * c - 1.0, 0.999, 1e-30]
    rng = np.random.default_rng(3)
    q = np.concatenate([edges, rng.random(200_000), rng.random(1000) ** 40])
    q = q[(q > 0.0) & (q < 1.0)]
    bufs = [np.empty(q.size) for _ in range(4)]
    got = R._neg2log(q, *bufs)
    assert np.array_equal(got.view(np.uint64), (-2.0 * R.portable_log(q)).view(np.uint64))


def _round_reference(x, dname):
    """round_to(dtype, x, satfinite) then the codes, the plain way: frexp, ldexp and rint for the
    rounding (as reference/core/dtype.cpp states it), numpy and ml_dtypes casts for the codes."""
    mant, emin, mx, _, nan_code = R._FLOAT[dname]
    d = dtypes.get(dname)
    with np.errstate(all="ignore"):
        if dname != "fp64":
            _, e = np.frexp(x)
            quantum = np.ldexp(1.0, np.maximum(e - 1, emin) - mant)
            r = np.rint(x / quantum) * quantum
            x = np.where(np.abs(r) > mx, np.copysign(mx, x), r)
        codes = x.astype(dtypes.storage(d)).view(d.codes).copy()
    codes[np.isnan(x)] = nan_code
    return codes


@pytest.mark.parametrize("dname", NONFINITE_DTYPES)
def test_encoder_matches_round_to(dname):
    """The integer RNE encoder (and numpy's cast for fp32) against round_to's statement on the hard
    values: every tie between neighbouring codes, the subnormal range, the smallest normal, past max
    (saturated), +-Inf, NaN, +-0, and random values over many binades."""
    d = dtypes.get(dname)
    mant, emin, mx, _, _ = R._FLOAT[dname]
    rng = np.random.default_rng(7)
    vals = [rng.standard_normal(50_000) * 10.0 ** rng.uniform(-50, 45, 50_000), np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, mx, -mx])]
    if d.nbytes <= 2:  # every finite code, its value and the midpoints to its neighbours
        allc = np.arange(2 ** d.bits, dtype=d.codes)
        v = np.sort(np.unique(dtypes.to_float64(allc.view(dtypes.storage(d)))))
        v = v[np.isfinite(v)]
    elif dname == "fp32":  # random floats over every binade, subnormals included, and their ties
        v32 = rng.integers(0, 0x7F7FFFFF, 100_000, dtype=np.uint32).view(np.float32)
        v = np.sort(np.concatenate([v32, np.nextafter(v32, np.float32(np.inf))]).astype(np.float64))  # with each one's neighbour
    if d.nbytes <= 4:
        vals += [v, (v[:-1] + v[1:]) / 2, np.nextafter((v[:-1] + v[1:]) / 2, np.inf), np.nextafter((v[:-1] + v[1:]) / 2, -np.inf)]
    tiny = 2.0**emin
    for base in (tiny, mx, 2.0 ** (emin - mant)):
        vals.append(np.array([base * f for f in (0.25, 0.5, 0.75, 1.0 - 2.0**-40, 1.0, 1.0 + 2.0**-40, 1.5, 2.0)]))
    vals.append(np.array([mx + mx * 2.0 ** (-mant - 1), np.nextafter(mx + mx * 2.0 ** (-mant - 1), 0.0), 1e308, -1e308]))
    x = np.concatenate(vals)
    x = np.concatenate([x, -x])
    want = _round_reference(x.copy(), dname)
    ws = R._Work(x.size, 1)
    got = np.empty(x.size, d.codes)
    with np.errstate(all="ignore"):
        R._encode(x.copy(), d, R._encode_plan(d), got, ws)
    bad = np.flatnonzero(got != want)
    assert not bad.size, f"{dname}: {bad.size} codes differ, e.g. x={x[bad[:4]].tolist()} got {got[bad[:4]]} want {want[bad[:4]]}"


def test_thread_default(monkeypatch):
    monkeypatch.delenv("ASSAY_RECIPE_THREADS", raising=False)
    n = R._threads()
    assert 1 <= n <= R.MAX_THREADS
    monkeypatch.setenv("ASSAY_RECIPE_THREADS", "3")
    assert R._threads() == 3
    r = R.Recipe(stream="t/x", seed=1, kind="normal", a=0.0, b=1.0, scale=1.0, dtype="bf16", shape=(3 * R.TASK + 5,))
    assert np.array_equal(R.generate_codes(r, threads=1), R.generate_codes(r))


def test_device_choice(monkeypatch):
    """numpy unless told, or unless the input is GPU-sized and torch sees a GPU."""
    monkeypatch.delenv("ASSAY_RECIPE_DEVICE", raising=False)
    d = dtypes.get("bf16")
    small = R.Recipe(stream="t/x", seed=1, kind="normal", a=0.0, b=1.0, scale=1.0, dtype="bf16", shape=(1000,))
    assert R._device(None, small, d, "x") is None
    big = R.Recipe(**{**small.__dict__, "shape": (R.AUTO_TORCH_MIN,)})
    assert R._device("numpy", big, d, "x") is None
    monkeypatch.setenv("ASSAY_RECIPE_DEVICE", "numpy")
    assert R._device(None, big, d, "x") is None
