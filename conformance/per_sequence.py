"""An upstream called once per sequence of the batch, its outputs stacked back along B.

Used to explain a verdict on a case whose tensors pass 2^31 elements (scripts/gpu_scale): when the
batched call fails and the same kernel, handed each sequence as its own B = 1 view (its pointer
starts at the sequence, so every offset inside the kernel stays below one sequence's size), passes
against the same golden, the kernel's arithmetic is right and what fails is an offset past 2^31.

Every input whose first axis is B is handed as the view ``t[b:b+1]`` of the one full tensor (the
recipe inputs are generated once); the outputs whose first axis is B are concatenated.
"""


class _OneSequence:
    """What the upstream's fn reads of a golden, for sequence ``b`` alone (B = 1)."""

    def __init__(self, golden, b: int, full: dict):
        self._g, self._b, self._full = golden, b, full
        self.case = dict(golden.case, B=1)

    def __getattr__(self, name):  # op, case_name, outputs, input_dtypes, axes, ...
        return getattr(self._g, name)

    def _batched(self, name) -> bool:
        ax = self._g.axes.get(name, ())
        return bool(ax) and ax[0] == "B"

    def to_torch(self, device=None, names=None) -> dict:
        names = list(names) if names is not None else list(self._full)
        return {n: self._full[n][self._b:self._b + 1] if self._batched(n) else self._full[n] for n in names}


def _cat(xs):
    if type(xs[0]).__module__.startswith("torch"):
        import torch
        return torch.cat(xs, 0)
    import numpy as np
    return np.concatenate(xs, 0)


def per_sequence(fn, device="cuda"):
    """fn(golden) -> outputs, called for each sequence b of the case's batch on a B = 1 view."""
    def wrapped(golden):
        B = int(golden.case.get("B", 1))
        full = golden.to_torch(device=device)
        parts = [fn(_OneSequence(golden, b, full)) for b in range(B)]
        out = {}
        for name in parts[0]:
            ax = golden.outputs[name].axes if name in golden.outputs else ()
            out[name] = _cat([p[name] for p in parts]) if ax and ax[0] == "B" else parts[-1][name]
        return out
    return wrapped
