# assay.check(..., relations=True) end to end with numpy SSD kernels (issue 40 item 2): a correct
# recurrence passes every relation row of the ssd goldens it runs on; a kernel reading its batch
# neighbour's initial state on odd batches is caught by batch.extended only; one that assumes its
# inputs are contiguous is caught by layout only; the layout parents put element offsets past 2^31;
# a malformed relation candidate is one Failed row, never a crash.
import sys
import textwrap

import numpy as np
import pytest

import assay
from assay import AssayError
from assay import relations as R

IMPLS = textwrap.dedent('''
    # numpy SSD forward (docs/ops/ssd.md "What it computes"), fp64 recurrence, rounded at the store.
    import numpy as np
    import assay

    def _ssd(g, x, dt, init, neighbour=False):
        c, f = g.case, g.inputs_f64
        A, Bm, Cm = f["A"], f["B"], f["C"]
        Bsz, T, H, P = x.shape
        G, N = Bm.shape[2], Bm.shape[3]
        d = dt + (f["dt_bias"] if "dt_bias" in f else 0.0)
        if c.get("dt_softplus", True):
            d = np.where(d <= 20, np.log1p(np.exp(np.minimum(d, 20))), d)
        d = np.clip(d, c.get("dt_min", 0.0), c.get("dt_max", np.inf))
        S = np.zeros((Bsz, H, P, N)) if init is None else init.copy()
        if neighbour and init is not None and Bsz > 1 and Bsz % 2 == 1:  # the planted defect
            S = init[[(b + 1) % Bsz for b in range(Bsz)]].copy()
        seq = f.get("seq_idx")
        hg = np.arange(H) // (H // G)
        Dv = f.get("D")
        out = np.zeros_like(x)
        after = np.zeros((Bsz, T, H, P, N))
        for b in range(Bsz):
            for t in range(T):
                if seq is not None and t > 0 and seq[b, t] != seq[b, t - 1]:
                    S[b] = 0.0
                dec = np.exp(d[b, t] * A)
                S[b] = dec[:, None, None] * S[b] + (d[b, t][:, None] * x[b, t])[:, :, None] * Bm[b, t, hg][:, None, :]
                y = np.einsum("hpn,hn->hp", S[b], Cm[b, t, hg])
                if Dv is not None:
                    y = y + (Dv[:, None] if Dv.ndim == 1 else Dv) * x[b, t]
                if "z" in f:
                    z = f["z"][b, t]
                    y = y * z / (1.0 + np.exp(-z))
                out[b, t] = y
                after[b, t] = S[b]
        res = {"out": out.astype(assay.dtypes.get(g.outputs["out"].dtype).numpy), "final_states": S.astype(np.float32)}
        if "varlen_states" in g.outputs:
            cu = f["cu_seqlens"].astype(int)
            vs = np.zeros(g.outputs["varlen_states"].shape)
            for s in range(len(cu) - 1):
                if cu[s + 1] > cu[s]:
                    vs[s] = after[0, cu[s + 1] - 1]
            res["varlen_states"] = vs.astype(np.float32)
        return res

    def good(g):
        f = g.inputs_f64
        return _ssd(g, f["x"], f["dt"], f.get("initial_states"))

    def neighbour_odd_b(g):  # sequence b starts from the initial states of (b + 1) % B when B is odd and > 1
        f = g.inputs_f64
        return _ssd(g, f["x"], f["dt"], f.get("initial_states"), neighbour=True)

    def assumes_contiguous(g):  # reads dt from its first element with row-major strides of its own shape
        a = g.inputs["dt"]
        st = np.cumprod((1,) + a.shape[:0:-1])[::-1] * a.itemsize
        dt = np.lib.stride_tricks.as_strided(a, a.shape, tuple(int(s) for s in st)).astype(np.float64)
        f = g.inputs_f64
        return _ssd(g, f["x"], dt, f.get("initial_states"))
''')

CASES = ["t65_q64_init", "t63_q16", "varlen_midchunk"]


@pytest.fixture(scope="module")
def impls(tmp_path_factory):
    d = tmp_path_factory.mktemp("rel_impls")
    (d / "ssd_rel_impls.py").write_text(IMPLS)
    sys.path.insert(0, str(d))
    import ssd_rel_impls

    yield ssd_rel_impls
    sys.path.remove(str(d))


def _check(fn, tmp_path, assay_bin, **kw):
    kw.setdefault("layout_offset", 0)  # strided views without the 2^31 padding (memory of the CI machine)
    kw.setdefault("relations", True)
    return assay.check("ssd", fn, cases=CASES, out=tmp_path / "out", assay_bin=assay_bin, quiet=True, html=False, **kw)


def test_correct_kernel_passes_every_relation(impls, tmp_path, assay_bin, record_summary):
    rep = _check(impls.good, tmp_path, assay_bin, batch_invariant=True)
    v = rep.verdicts()
    assert rep.exit_code == 0, str(rep)
    for c in CASES:
        assert v[c] == "Passed", str(rep)
    for row in ("t65_q64_init@batch.alone", "t65_q64_init@batch.extended", "t65_q64_init@continuation", "t65_q64_init@layout",
                "t63_q16@continuation", "t63_q16@layout", "varlen_midchunk@varlen"):
        assert v.get(row) == "Passed", f"{row}: {str(rep)}"
    assert v["t63_q16@batch.alone"] == "NotSupported"
    assert v["varlen_midchunk@continuation"] == "NotSupported"
    reasons = {c: r for c, _, r in rep.rows}
    assert "bitwise equal to the one run" in reasons["t65_q64_init@batch.extended"]
    assert "sequence 1 is empty" in reasons["varlen_midchunk@varlen"]
    rel_rows = [c for c in v if "@" in c]
    assert {c["relation"] for c in rep.json["cases"] if "relation" in c} == {"batch.alone", "batch.extended", "continuation",
                                                                               "varlen", "layout"}
    record_summary(f"assay.check ssd relations (numpy recurrence): {len(rel_rows)} relation rows, "
                   f"{sum(v[c] == 'Passed' for c in rel_rows)} Passed, the rest NotSupported")


def test_neighbour_state_on_odd_batches_is_caught_by_batch_extended_only(impls, tmp_path, assay_bin):
    rep = _check(impls.neighbour_odd_b, tmp_path, assay_bin)
    v = rep.verdicts()
    assert rep.exit_code == 1
    for c in CASES:  # no golden has an odd batch of more than one sequence
        assert v[c] == "Passed", str(rep)
    assert v["t65_q64_init@batch.alone"] == "Passed"
    assert v["t65_q64_init@batch.extended"] == "Incorrect"
    reason = dict((c, r) for c, _, r in rep.rows)["t65_q64_init@batch.extended"]
    assert reason.startswith("relation batch.extended")
    assert "sequence 0 (the batch plus a copy of sequence 1 (B = 3))" in reason
    assert "[b=0," in reason and "allowed" in reason


def test_contiguity_assumption_is_caught_by_layout_only(impls, tmp_path, assay_bin):
    rep = _check(impls.assumes_contiguous, tmp_path, assay_bin)
    v = rep.verdicts()
    for c in CASES:
        assert v[c] == "Passed", str(rep)
    assert v["t65_q64_init@layout"] in ("Incorrect", "Failed"), str(rep)
    assert v["t65_q64_init@continuation"] == "Passed"
    reason = dict((c, r) for c, _, r in rep.rows)["t65_q64_init@layout"]
    assert reason.startswith("relation layout"), reason


def test_layout_runs_on_a_sampled_golden(impls, tmp_path, assay_bin, run_assay, repo, monkeypatch):
    # A sampled golden keeps only some elements, so batch / continuation / varlen (which reassemble
    # whole outputs from derived cases) do not apply; layout runs the whole case once and is judged at
    # the sampled elements: a correct kernel passes it, a contiguity-assuming one fails it there.
    fx = tmp_path / "fixtures"
    fx.mkdir()
    (fx / "ssd.toml").write_text((repo / "fixtures" / "ssd.toml").read_text() +
                                 '\n[[case]]\nname = "sampled_layout"\nlevel = "L0"\nseed = 5\nB = 2\nT = 130\nH = 2\n'
                                 'G = 1\nP = 4\nN = 8\nchunk_size = 64\ninitial_states = true\n'
                                 'sample = { seqs = [1, 0], heads = [1, 0], tokens = 16 }\n')
    gdir = tmp_path / "golden"
    p = run_assay("gen", "--fixtures", fx, "--op", "ssd", "--case", "sampled_layout", "-q", "--out", gdir)
    assert p.returncode == 0, p.stderr
    monkeypatch.setenv("ASSAY_FIXTURES", str(fx))
    kw = dict(cases=["sampled_layout"], golden_dir=gdir / "ssd", assay_bin=assay_bin, quiet=True, html=False, relations=True,
              layout_offset=0)
    rep = assay.check("ssd", impls.good, out=tmp_path / "good", **kw)
    v = rep.verdicts()
    assert v["sampled_layout"] == "Passed" and v["sampled_layout@layout"] == "Passed", str(rep)
    reasons = {c: r for c, _, r in rep.rows}
    for rel in ("batch.alone", "batch.extended", "continuation"):
        assert v[f"sampled_layout@{rel}"] == "NotSupported" and "sampled golden" in reasons[f"sampled_layout@{rel}"]
    bad = assay.check("ssd", impls.assumes_contiguous, out=tmp_path / "bad", **kw)
    v = bad.verdicts()
    assert v["sampled_layout"] == "Passed" and v["sampled_layout@layout"] in ("Incorrect", "Failed"), str(bad)
    reason = {c: r for c, _, r in bad.rows}["sampled_layout@layout"]
    assert reason.startswith("relation layout") and "[b=" in reason, reason  # the whole tensor's index


def test_layout_parents_pass_2e31_with_small_tensors():
    class G:  # shapes only: mamba_ssm's dt of the 32-bit offset bug, seqlen 115,866, 128 heads
        op = "ssd"
        inputs = {"dt": np.broadcast_to(np.float32(0), (1, 115866, 128)), "x": np.broadcast_to(np.float32(0), (1, 115866, 128, 64))}
        input_dtypes = {"dt": "fp32", "x": "bf16"}
        axes = {"dt": ("B", "T", "H"), "x": ("B", "T", "H", "P")}

    p = R.layout_parents(G, 1 << 31)
    W = -(-(2**31) // ((115866 * 7) // 8))  # 21182: rows from 7/8 of T on start past 2^31
    assert p["fp32"]["members"] == {"dt": (0, 128)} and p["fp32"]["width"] == W
    assert p["bf16"]["members"] == {"x": (0, 128 * 64)} and p["bf16"]["width"] == W
    # mamba_ssm's chunk start of its last 256-token chunk, pid_c * chunk_size * stride_dt_seqlen:
    assert (115866 // 256) * 256 * W >= 2**31
    assert p["fp32"]["last_offset"] >= 2**31 and p["fp32"]["shape"] == (1, 115866, W)
    assert R.layout_parents(G, 0)["fp32"]["width"] == 129  # one spare column: a strided view even alone


def test_relation_usage_errors(impls, tmp_path, assay_bin):
    with pytest.raises(AssayError, match="relations"):
        assay.check("ssd", impls.good, cases="t63_q16", out=tmp_path, assay_bin=assay_bin, relations=["nope"])
    with pytest.raises(AssayError, match="layout_offset"):
        assay.check("ssd", impls.good, cases="t63_q16", out=tmp_path, assay_bin=assay_bin, relations=True, layout_offset=-1)


def test_malformed_relation_candidate_is_one_failed_row(impls, tmp_path, assay_bin, run_assay, repo):
    rep = _check(impls.good, tmp_path, assay_bin, relations=["continuation"])
    rdir = tmp_path / "out" / "ssd" / "relations"
    (rdir / "t63_q16@bogus.h5").write_bytes(b"not hdf5")
    p = run_assay("compare", "--golden-dir", repo / "golden" / "ssd", "--candidate-dir", tmp_path / "out" / "ssd" / "candidates",
                  "--case", "t63_q16", "--relations-dir", rdir, "--json")
    assert p.returncode == 1, p.stderr
    import json

    rows = {c["case"]: c for c in json.loads(p.stdout)["cases"]}
    assert rows["t63_q16"]["verdict"] == "Passed"
    assert rows["t63_q16@continuation"]["verdict"] == "Passed"
    assert rows["t63_q16@bogus"]["verdict"] == "Failed"
    assert rows["t63_q16@bogus"]["reason"].startswith("bad relation candidate: ")
    assert "\n" not in rows["t63_q16@bogus"]["reason"]
    assert rep.exit_code == 0
