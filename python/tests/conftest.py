# Shared fixtures of the python/assay tests: the repo root, the committed goldens, the assay binary
# (ASSAY_BIN, else <repo>/build/bin/assay) and a helper to run it.
import glob
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDENS = sorted(glob.glob(str(REPO / "golden" / "*" / "*.h5")))


# Lines a test wants shown at the end of the run (pytest -q hides print()): see record_summary.
SUMMARY: list = []


@pytest.fixture(scope="session")
def record_summary():
    """record_summary(line): shown in pytest's terminal summary (e.g. how many goldens were decoded)."""
    return SUMMARY.append


def pytest_terminal_summary(terminalreporter):
    for line in SUMMARY:
        terminalreporter.write_line(f"assay: {line}")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def goldens() -> list:
    assert GOLDENS, f"no goldens under {REPO / 'golden'}"
    return GOLDENS


@pytest.fixture(scope="session")
def assay_bin() -> str:
    b = os.path.abspath(os.environ.get("ASSAY_BIN") or REPO / "build" / "bin" / "assay")
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        pytest.fail(f"assay binary {b} is missing: build it (scripts/test) or set ASSAY_BIN")
    return b


@pytest.fixture(scope="session")
def run_assay(assay_bin):
    """run_assay(*args) -> CompletedProcess (text, captured)."""

    def run(*args, **kw):
        return subprocess.run([assay_bin, *map(str, args)], capture_output=True, text=True, timeout=120, **kw)

    return run


def subcommand_has(run, sub: str, option: str) -> bool:
    p = run(sub, "--help")
    return option in p.stdout
