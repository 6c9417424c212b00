# assay: the Python side of the assay correctness gate: read goldens, write candidates, and check
# a Python kernel over an op's goldens through the C++ `assay compare`.
"""assay: read golden files, write candidate files, check Python kernels.

- :func:`open` / :mod:`assay.golden`: a golden's case fields, inputs (storage dtypes, bit-exact),
  fp64 expected values; ``to_torch`` / ``to_jax``.
- :mod:`assay.candidate`: ``write(path, golden, outputs)`` for ``assay compare``.
- :func:`check`: run a kernel over an op's goldens and judge them with the C++ binary.
- :mod:`assay.relations`: the relations that need no oracle (``check(..., relations=True)``).
"""
from . import candidate, dtypes, errors, golden, relations
from .check import CheckReport, check
from .errors import AssayError, NotSupported
from .golden import Golden, OutputSpec
from .golden import open  # noqa: A004 (assay.open is the documented entry point)

__all__ = ["AssayError", "NotSupported", "CheckReport", "Golden", "OutputSpec", "candidate", "check", "dtypes", "errors", "golden",
           "open", "relations"]
__version__ = "0.1.0"
