"""mamba_ssm's Triton SSD (`mamba_chunk_scan_combined`, the Mamba-2 scan) against the ssd goldens.

Called as Mamba2 calls it: x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx,
dt_softplus, dt_limit, return_final_states=True; with `varlen_states` also cu_seqlens and
return_varlen_states=True. Every golden tensor already has upstream's name and layout. Backward
goldens run forward + torch autograd (`_mamba_chunk_scan_combined_bwd`), loss <dout, out> +
<dfinal_states, final_states>, as examples/python/mamba_ssd_backward.py does.

Three Upstreams, one profile each:
  mamba_ssm.mamba_chunk_scan_combined           bf16 / fp16 cases, strict
  mamba_ssm.mamba_chunk_scan_combined[fp32]     fp32 cases, tf32: the kernels' tl.dot calls name no
                                                input_precision, and Triton's fp32 default is TF32
  mamba_ssm.mamba_chunk_scan_combined[tf32-all] every forward case under tf32 (the same call): a
                                                looser profile must still accept what strict does

The source is found at $MAMBA_SSM_SRC (the folder holding mamba_ssm/), else
<repo>/.upstream/mamba_ssm-*, else an installed mamba_ssm; only its Triton files are imported (the
package __init__s, which load the compiled CUDA extensions, are bypassed). mamba3.py reuses the
loader (`load`, `version`).
"""
import glob
import importlib
import importlib.util
import os
import re
import sys
import types

from conformance.upstream import Unavailable, Upstream

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIST = "mamba-ssm"
GRADS = {"dx": "x", "ddt": "dt", "dA": "A", "dB": "B", "dC": "C", "dD": "D", "dz": "z",
         "ddt_bias": "dt_bias", "dinitial_states": "initial_states"}


# ---- locating and importing the source tree (shared with mamba3.py) --------------------------------

def source_dir():
    """The folder holding mamba_ssm/, or None."""
    env = os.environ.get("MAMBA_SSM_SRC")
    if env:
        return os.path.abspath(env)
    found = sorted(glob.glob(os.path.join(REPO, ".upstream", "mamba_ssm-*", "mamba_ssm")))
    if found:
        return os.path.dirname(found[-1])
    spec = importlib.util.find_spec("mamba_ssm")  # an installed package (not executed)
    if spec is not None and spec.submodule_search_locations:
        return os.path.dirname(list(spec.submodule_search_locations)[0])
    return None


def version():
    """mamba_ssm's version: __version__ in its __init__.py, else the folder name, else None."""
    src = source_dir()
    if src is None:
        return None
    try:
        with open(os.path.join(src, "mamba_ssm", "__init__.py"), encoding="utf-8") as f:
            m = re.search(r'__version__\s*=\s*["\']([^"\']+)', f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    m = re.match(r"mamba_ssm-(.+)$", os.path.basename(src))
    return m.group(1) if m else None


def load(module):
    """Imports mamba_ssm.<module> from the source tree with empty stand-ins for the package
    __init__s on its way (mamba_ssm, mamba_ssm.ops, ...). Unavailable when it cannot."""
    try:
        import torch
    except ImportError as e:
        raise Unavailable(f"torch is not installed ({e})") from None
    if not torch.cuda.is_available():
        raise Unavailable("no CUDA device: mamba_ssm's Triton kernels need a GPU")
    src = source_dir()
    if src is None or not os.path.isdir(os.path.join(src, "mamba_ssm")):
        raise Unavailable("mamba_ssm source not found: set MAMBA_SSM_SRC to the folder holding "
                          "mamba_ssm/ (or unpack the sdist as .upstream/mamba_ssm-<version>)")
    parts = ("mamba_ssm." + module).split(".")
    for i in range(1, len(parts)):
        name, path = ".".join(parts[:i]), os.path.join(src, *parts[:i])
        have = sys.modules.get(name)
        if have is None or list(getattr(have, "__path__", [])) != [path]:
            pkg = types.ModuleType(name)
            pkg.__path__ = [path]
            sys.modules[name] = pkg
    try:
        return importlib.import_module("mamba_ssm." + module)
    except ImportError as e:
        raise Unavailable(f"mamba_ssm.{module}: {e}") from None


# ---- mamba_chunk_scan_combined -------------------------------------------------------------------

def _supports(dtypes, forward_only=False):
    def supports(case, golden):
        d = golden.input_dtypes.get("x")
        if d not in dtypes:
            return False, f"x is {d}; this upstream takes {'/'.join(dtypes)} activations"
        if case.get("backward", False):
            if forward_only:
                return False, "backward case (this entry checks the forward only)"
            if case.get("varlen_states", False):
                return False, "varlen_states with backward (upstream asserts: not supported in backward)"
        return True, ""
    return supports


def _make_fn(supports):
    def make_fn():
        kernel = load("ops.triton.ssd_combined").mamba_chunk_scan_combined
        import torch

        def fn(golden):
            c = golden.case
            x = golden.to_torch(device="cuda")
            backward = bool(c.get("backward", False))
            varlen = "varlen_states" in golden.outputs
            leaves = {n: x[n].clone().requires_grad_(backward) for n in GRADS.values() if n in x}
            dt_max = c.get("dt_max")
            dt_limit = (float(c.get("dt_min") or 0.0), float("inf") if dt_max is None else float(dt_max))
            with torch.set_grad_enabled(backward):
                res = kernel(
                    leaves["x"], leaves["dt"], leaves["A"], leaves["B"], leaves["C"], int(c.get("chunk_size", 64)),
                    D=leaves.get("D"), z=leaves.get("z"), dt_bias=leaves.get("dt_bias"),
                    initial_states=leaves.get("initial_states"),
                    seq_idx=x["seq_idx"].to(torch.int32).contiguous() if "seq_idx" in x else None,
                    cu_seqlens=x["cu_seqlens"].to(torch.int32).contiguous() if varlen else None,
                    dt_softplus=bool(c.get("dt_softplus", True)), dt_limit=dt_limit,
                    return_final_states=True, return_varlen_states=varlen)
            out, final_states = res[0], res[1]
            outputs = {"out": out.detach(), "final_states": final_states.detach()}
            if varlen:
                outputs["varlen_states"] = res[2]
            if backward:
                dfs = x["dfinal_states"].to(final_states.dtype) if "dfinal_states" in x else torch.zeros_like(final_states)
                torch.autograd.backward([out, final_states], [x["dout"].to(out.dtype), dfs])
                outputs.update({g: leaves[n].grad for g, n in GRADS.items() if n in leaves and g in golden.outputs})
            return outputs
        return fn
    return make_fn


_WHAT = ("mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, "
         "[cu_seqlens], dt_softplus, dt_limit=(dt_min, dt_max), return_final_states=True[, "
         "return_varlen_states=True]); golden tensors passed as they are (same names and layouts); "
         "backward cases: torch autograd with dout, dfinal_states")
_strict = _supports(("bf16", "fp16"))
_fp32 = _supports(("fp32",))
_all_fwd = _supports(("bf16", "fp16", "fp32"), forward_only=True)

UPSTREAMS = [
    Upstream("mamba_ssm.mamba_chunk_scan_combined", DIST, "ssd", "strict",
             "bf16/fp16 io: dots on x.dtype operands (cb.to(x.dtype) before tl.dot(cb, x)), fp32 "
             "dt/cumsum/accumulators, chunk states in C.dtype (_state_passing_fwd out_dtype=C.dtype)",
             _strict, _make_fn(_strict), what=_WHAT),
    Upstream("mamba_ssm.mamba_chunk_scan_combined[fp32]", DIST, "ssd", "tf32",
             "ssd_chunk_scan.py: `acc += tl.dot(cb, x)`, `tl.dot(C, prev_states)` name no "
             "input_precision, and Triton's default for fp32 operands is TF32",
             _fp32, _make_fn(_fp32), what=_WHAT),
    Upstream("mamba_ssm.mamba_chunk_scan_combined[tf32-all]", DIST, "ssd", "tf32",
             "the natural call on every forward case under tf32: a looser profile must accept "
             "whatever strict accepts (bf16/fp16 cases fall back to their strict entries)",
             _all_fwd, _make_fn(_all_fwd), what=_WHAT),
]
