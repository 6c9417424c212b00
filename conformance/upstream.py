"""What one upstream kernel under conformance is: its op, the profile its own code implies, which
goldens it claims and how it is called. Every module in conformance/upstreams/ exports
``UPSTREAMS: list[Upstream]``; conformance/run.py runs them.
"""
from dataclasses import dataclass, field
from typing import Callable


class Unavailable(Exception):
    """The upstream cannot run here (package missing, no GPU, API refuses this machine): reported
    as not run, never as passed."""


@dataclass
class Upstream:
    # Name in reports and in conformance/expected.toml: "<package>.<entry point>[<variant>]",
    # e.g. "torch.sdpa[flash]", "fla.chunk_gated_delta_rule", "torchao.to_mx[floor]".
    name: str
    # The distribution whose version is recorded ("torch", "fla-core", "torchao", "mamba-ssm").
    dist: str
    op: str
    # The precision profile the upstream code implies (strict unless its code rounds below storage),
    # and one line from its code saying why.
    profile: str
    profile_why: str
    # supports(case: dict, golden: assay.Golden) -> (bool, why): decided from the golden's resolved
    # case fields, dtypes and output names, never from the case name.
    supports: Callable
    # make_fn() -> fn(golden) -> {output name: tensor} (or (outputs, intermediates)). Imports the
    # upstream package lazily; raises Unavailable when it cannot run here. fn may assume `supports`
    # accepted the golden: callers go through checked_fn().
    make_fn: Callable
    # One line: what this upstream computes and how the goldens' tensors are mapped onto its call.
    what: str = ""
    # Extra environment the check needs (set before make_fn is called, restored after).
    env: dict = field(default_factory=dict)

    def checked_fn(self):
        """make_fn()'s fn behind this upstream's `supports`: a golden it refuses raises
        NotImplementedError (assay.check reports NotSupported) before the upstream is called."""
        fn = self.make_fn()

        def checked(golden):
            ok, why = self.supports(golden.case, golden)
            if not ok:
                raise NotImplementedError(f"{golden.case_name}: {why}")
            return fn(golden)
        return checked
