# assay.errors: the one exception type the Python package raises for bad input or usage.
"""Errors of the assay Python package."""


class NotSupported(Exception):
    """Raised by a kernel for a golden it cannot express (a dtype, layout or option it does not
    implement): the case is NotSupported with this message as its reason, not Failed, as a built-in
    kernel's ``can_implement`` refusal is. Decide from the golden's case fields, never from its name."""


class AssayError(ValueError):
    """A bad file, dataset, option or argument, said in one line that names it.

    Raised for usage and input errors only (a golden that is not an HDF5 file, a candidate output
    with the wrong shape, a missing `assay` binary, ...); a kernel that computes wrong numbers is a
    verdict in a report, never an exception.
    """

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split("\n")))
