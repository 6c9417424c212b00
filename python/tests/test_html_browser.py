"""The HTML report of a failing run, rendered by headless Chromium.

A planted failure (an SSD golden whose `out` drifts from t = 512 on in one head) is judged by
`assay compare --golden-dir ... --html`; Chromium renders the report. The test checks the rendered
DOM has the verdict table and, for the failing tensor, the error-vs-position plot, the heatmap and
the histogram, and that a screenshot is not blank (enough non-white pixels, and the mismatch reds
of the plots present).

Skipped (reported as skipped, never passed) when no `chromium` is installed: `scripts/setup
--browser` installs Debian's package. Set ASSAY_HTML_SHOT to keep the screenshot at that path.
"""
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import h5py
import ml_dtypes
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _assay_bin():
    b = os.environ.get("ASSAY_BIN") or str(REPO / "build" / "bin" / "assay")
    if not Path(b).exists():
        pytest.skip(f"assay binary not built ({b})")
    return b


def _read_png(path):
    """Decodes an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) to an (h, w, c) array."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            ch = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * ch)
    out = np.zeros((height, width * ch), dtype=np.int32)
    prev = np.zeros(width * ch, dtype=np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        cur = np.zeros_like(line)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 255
        else:  # 1 (sub), 3 (average), 4 (Paeth) depend on the pixel to the left: per pixel
            for x in range(width * ch):
                a = cur[x - ch] if x >= ch else 0
                b = prev[x]
                c = prev[x - ch] if x >= ch else 0
                if f == 1:
                    p = a
                elif f == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + p) & 255
        out[y] = cur
        prev = cur
    return out.reshape(height, width, ch)


def _planted_failure(tmp):
    golden = REPO / "golden" / "ssd"
    cand = tmp / "cands"
    cand.mkdir()
    for case in ("t1000_q64", "t300_q256"):
        with h5py.File(golden / f"{case}.h5", "r") as g, h5py.File(cand / f"{case}.h5", "w") as c:
            for name, ds in g["expected"].items():
                dt = ds.attrs["dtype"]
                dt = dt.decode() if isinstance(dt, bytes) else str(dt)
                axes = ds.attrs["axes"]
                axes = (axes.decode() if isinstance(axes, bytes) else str(axes)).split(",")
                e = ds[()]
                a = e.astype(ml_dtypes.bfloat16 if dt == "bf16" else np.float32).astype(np.float32)
                if case == "t1000_q64" and name == "out":
                    idx = [slice(None)] * a.ndim
                    idx[axes.index("T")] = slice(512, None)
                    idx[axes.index("H")] = 1
                    drift = 1 + np.linspace(0, 0.05, a.shape[axes.index("T")] - 512, dtype=np.float32)
                    a[tuple(idx)] *= drift.reshape([-1] + [1] * (a.ndim - axes.index("T") - 2))
                c[f"outputs/{name}"] = a
    return golden, cand


@pytest.mark.skipif(BROWSER is None, reason="no chromium (scripts/setup --browser installs it)")
def test_failing_report_renders_plots_in_chromium(tmp_path):
    golden, cand = _planted_failure(tmp_path)
    html = tmp_path / "report.html"
    r = subprocess.run([_assay_bin(), "compare", "--golden-dir", str(golden), "--candidate-dir", str(cand),
                        "--case", "t1000_q64", "--case", "t300_q256", "--html", str(html)],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr  # one Incorrect case
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1800"]
    dom = subprocess.run([BROWSER, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=60).stdout
    assert '<table id="verdicts">' in dom
    for cls in ("seq-plot", "heatmap", "hist"):
        assert f'class="{cls}"' in dom, cls
    assert dom.count("<rect") > 100  # heatmap cells and histogram bars were rendered
    assert "first mismatch" in dom and "Incorrect" in dom
    shot = Path(os.environ.get("ASSAY_HTML_SHOT") or tmp_path / "report.png")
    subprocess.run([BROWSER, *flags, f"--screenshot={shot}", html.as_uri()], capture_output=True, timeout=60, check=True)
    px = _read_png(shot)[..., :3]
    non_white = np.mean(np.any(px < 235, axis=-1))
    assert non_white > 0.05, f"screenshot nearly blank: {non_white:.3f} of pixels not white"
    red = np.sum((px[..., 0] > 170) & (px[..., 1] < 110) & (px[..., 2] < 90))
    assert red > 200, f"no mismatch reds in the plots ({red} pixels)"


def _matrix_run(tmp):
    """scaled_add goldens judged as one kernel: a correct candidate, a planted failure (one element
    doubled), and a case the kernel declines (raise assay.NotSupported: a <case>.error)."""
    golden = REPO / "golden" / "scaled_add"
    cand = tmp / "cands"
    cand.mkdir()
    names = sorted(p.stem for p in golden.glob("*.h5"))
    for i, case in enumerate(names[:2]):
        with h5py.File(golden / f"{case}.h5", "r") as g, h5py.File(cand / f"{case}.h5", "w") as c:
            for name, ds in g["expected"].items():
                dt = ds.attrs["dtype"]
                dt = dt.decode() if isinstance(dt, bytes) else str(dt)
                a = ds[()].astype({"bf16": ml_dtypes.bfloat16, "fp16": np.float16}.get(dt, np.float32)).astype(np.float32)
                if i == 1:
                    a.flat[a.size // 2] *= 2
                c[f"outputs/{name}"] = a
    (cand / f"{names[2]}.error").write_text("NotSupported: fp32 outputs only (raised by demo:kernel)\n")
    return golden, cand, names


@pytest.mark.skipif(BROWSER is None, reason="no chromium (scripts/setup --browser installs it)")
def test_report_matrix_renders_in_chromium(tmp_path):
    golden, cand, names = _matrix_run(tmp_path)
    html = tmp_path / "matrix.html"
    r = subprocess.run([_assay_bin(), "compare", "--golden-dir", str(golden), "--candidate-dir", str(cand), "--name", "demo",
                        "--html", str(html)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr  # one Incorrect case
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1000,700"]
    dom = subprocess.run([BROWSER, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=60).stdout
    assert '<table id="matrix">' in dom and '<details id="not-supported">' in dom
    assert f"demo · scaled_add/{names[1]}: Incorrect" in dom  # the failing cell's title
    assert f"demo · scaled_add/{names[0]}: Passed" in dom
    assert "1 NotSupported pairs, 1 reason" in dom and "fp32 outputs only" in dom
    assert dom.index('id="matrix"') < dom.index('id="verdicts"')  # the picture first
    shot = Path(os.environ.get("ASSAY_HTML_MATRIX_SHOT") or tmp_path / "matrix.png")
    subprocess.run([BROWSER, *flags, f"--screenshot={shot}", html.as_uri()], capture_output=True, timeout=60, check=True)
    px = _read_png(shot)[..., :3]
    assert np.mean(np.any(px < 235, axis=-1)) > 0.02, "screenshot nearly blank"
    # The Incorrect cell's red (an error 2x its allowance and more: orange to dark red).
    assert np.sum((px[..., 0] > 120) & (px[..., 1] < 100) & (px[..., 2] < 60)) > 20
