# A kernel declines a golden it cannot express by raising assay.NotSupported: the case is
# NotSupported with its reason (as a built-in kernel's can_implement refusal), never Failed.
import assay


def _kernel(g):
    if g.outputs["out"].dtype != "bf16":
        raise assay.NotSupported(f"{g.outputs['out'].dtype} output: this kernel writes bf16 only")
    out = g.case["alpha"] * g.inputs_f64["x"] + g.case["beta"] * g.inputs_f64["y"]
    import ml_dtypes
    return {"out": out.astype(ml_dtypes.bfloat16)}


def test_not_supported_is_its_own_verdict(assay_bin, tmp_path):
    rep = assay.check("scaled_add", _kernel, out=tmp_path, assay_bin=assay_bin, html=False, quiet=True)
    v = rep.verdicts()
    assert "NotSupported" in v.values() and "Passed" in v.values(), v
    assert "Failed" not in v.values(), v
    ns = [c for c in rep.json["cases"] if c["verdict"] == "NotSupported"]
    assert all("writes bf16 only" in c["reason"] for c in ns)
    assert rep.exit_code == 0  # declining is not failing
