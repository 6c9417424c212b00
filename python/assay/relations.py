# assay.relations: the relations that need no oracle (docs/DESIGN.md "Relations need no oracle"), for
# Python kernels: ``assay.check(op, fn, relations=True)`` runs ``fn`` again on cases derived from each
# golden's inputs, reassembles their outputs in the golden's shapes and writes one relation candidate
# per check, which the C++ binary judges against the case's own candidate (`assay compare
# --relations-dir`, verify/run/relations.h judge_relation_file): every covered element by the
# golden's tolerance, and bit for bit for the batch checks with ``batch_invariant=True``.
#
# The checks mirror the C++ ones (verify/run/relations.cpp, same names, same derived cases):
#   batch.alone, batch.extended, continuation, varlen
# plus one only Python kernels get:
#   layout   the same input values handed as non-contiguous views into a wider parent tensor, the way
#            a model splits its input projection (x, dt, B, C, z): every dense input whose axes start
#            with (B, T) is a column slice of a parent [B, T, W] of its dtype, W padded so that every
#            row from 7/8 of B * T on starts past ``layout_offset`` elements (2^31 by default:
#            mamba_ssm's _chunk_cumsum_fwd computed pid_c * chunk_size * stride_dt_seqlen in 32 bits,
#            and a chunk start in the last eighth of the rows is where that product is largest). The
#            parent is allocated, not filled: np.empty / torch.empty touch only the views' pages.
#            The one check that also runs on a sampled golden (one run of the whole case: judged at
#            the sampled elements).
"""Relations for Python kernels (``assay.check(..., relations=True)``)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from . import candidate as _candidate
from . import dtypes
from .errors import AssayError
from .golden import OutputSpec

__all__ = ["FAMILIES", "Check", "RelatedGolden", "plan", "run_check", "layout_parents"]

FAMILIES = ("batch", "continuation", "varlen", "layout")

# What a relation must know of an op (verify/run/relations.cpp OpSpec, the same table).
_SPECS = {
    "ssd": dict(states=[("initial_states", "final_states")], flag="initial_states", pack="seqlens",
                pack_inputs=["cu_seqlens", "seq_idx"], per_seq=False, packed_final="varlen_states"),
    "gated_delta": dict(states=[("initial_state", "final_state")], flag="initial_state", pack="cu_seqlens",
                        pack_inputs=["cu_seqlens"], per_seq=True),
    "mamba3": dict(states=[("Angle_State", "final_angle"), ("K_State", "final_k"), ("SSM_State", "final_ssm"),
                           ("V_State", "final_v")], flag="initial_states", pack="cu_seqlens",
                   pack_inputs=["cu_seqlens"], per_seq=True),
    "attention": dict(pack_inputs=["cu_seqlens_q", "cu_seqlens_k"], batch_lists=["seqlens_q", "seqlens_k"],
                      paged_input="block_table"),
}


@dataclass
class _Run:
    label: str
    sequence: int
    case: dict
    inputs: dict            # name -> numpy array (storage dtype); a handed-over input is None until filled
    input_dtypes: dict
    axes: dict
    outputs: dict           # name -> OutputSpec
    handovers: list = field(default_factory=list)   # (input, from_output, from_run)
    places: list = field(default_factory=list)      # (run_output, golden_output, axis, src0, dst0, len)
    layout_offset: int | None = None                # the layout check's run: hand the inputs as strided views


@dataclass
class Check:
    """One check planned for a golden: ``name``, ``family``, ``what``, ``not_applicable`` (why this
    golden cannot form it, else ""), ``bitwise``, ``runs`` and ``notes``."""

    name: str
    family: str
    what: str = ""
    not_applicable: str = ""
    bitwise: bool = False
    runs: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def _spec(op):
    return _SPECS.get(op)


def _packed(g, s) -> bool:
    return any(n in g.inputs for n in s.get("pack_inputs", []))


def _ax(axes, a) -> int:
    return list(axes).index(a) if a in axes else -1


def _take(a, axis, idx):
    return np.take(a, np.asarray(idx, dtype=np.int64), axis=axis)


def _with_dim(shape, axis, n):
    s = list(shape)
    s[axis] = n
    return tuple(s)


def _spec_with(o: OutputSpec, shape, axes=None) -> OutputSpec:
    return OutputSpec(o.name, o.dtype, tuple(shape), tuple(axes if axes is not None else o.axes), o.allow_nonfinite)


def _base_run(g, label, sequence, case) -> _Run:
    return _Run(label, sequence, dict(case), {}, {}, {}, {})


def _plan_batch(g, s, bitwise, out):
    alone = Check("batch.alone", "batch", "every sequence of the batch run alone (B = 1)", bitwise=bitwise)
    ext = Check("batch.extended", "batch", "the batch with a copy of its last sequence appended (B + 1)", bitwise=bitwise)
    B = int(g.case.get("B", 0) or 0)
    has_b = any(len(g.axes[n]) and g.axes[n][0] == "B" and g.inputs[n].shape[0] == B for n in g.inputs)
    na = ""
    if s is None:
        na = f"op {g.op} declares no relations"
    elif _packed(g, s):
        na = "a packed (varlen) case: its sequences are checked by the varlen relation"
    elif s.get("paged_input") and s["paged_input"] in g.inputs:
        na = "paged KV: the fixture sizes the page pool for the whole batch (a sub-batch would need its own pool)"
    elif not has_b or B < 1:
        na = "no input with a leading batch axis B of the case's B"
    if na:
        alone.not_applicable = ext.not_applicable = na
        out += [alone, ext]
        return

    def run(idx, label, seq):
        case = dict(g.case)
        case["B"] = len(idx)
        for lf in s.get("batch_lists", []):
            v = g.case.get(lf)
            if isinstance(v, list) and len(v) == B:
                case[lf] = [v[i] for i in idx]
        r = _base_run(g, label, seq, case)
        for n, a in g.inputs.items():
            r.inputs[n] = _take(a, 0, idx) if g.axes[n] and g.axes[n][0] == "B" else a
            r.input_dtypes[n], r.axes[n] = g.input_dtypes[n], g.axes[n]
        for n, o in g.outputs.items():
            r.outputs[n] = _spec_with(o, _with_dim(o.shape, 0, len(idx))) if o.axes and o.axes[0] == "B" else o
        return r

    if B < 2:
        alone.not_applicable = "B = 1: no other sequence to remove"
    for b in range(B if B >= 2 else 0):
        r = run([b], f"sequence {b} alone (B = 1)", b)
        r.places = [(n, n, 0, 0, b, 1) for n, o in g.outputs.items() if o.axes and o.axes[0] == "B"]
        alone.runs.append(r)
    r = run(list(range(B)) + [B - 1], f"the batch plus a copy of sequence {B - 1} (B = {B + 1})", -1)
    r.places = [(n, n, 0, 0, 0, B) for n, o in g.outputs.items() if o.axes and o.axes[0] == "B"]
    ext.runs.append(r)
    for c in (alone, ext):
        c.notes += [f"output '{n}' has no B axis: not covered" for n, o in g.outputs.items() if not (o.axes and o.axes[0] in ("B", "Nseq", "NS", "seq"))]
    out += [alone, ext]


def _plan_continuation(g, s, out):
    c = Check("continuation", "continuation")
    T = int(g.case.get("T", 0) or 0)
    if s is None or not s.get("states"):
        c.not_applicable = f"op {g.op} hands over no state"
    elif _packed(g, s):
        c.not_applicable = "a packed (varlen) case"
    elif T < 2:
        c.not_applicable = f"T = {T}: nothing to split"
    else:
        for _, o in s["states"]:
            if o not in g.outputs:
                c.not_applicable = f"the golden has no '{o}' output to hand over"
                break
    if c.not_applicable:
        out.append(c)
        return
    Q = int(g.case.get("chunk_size", 64) or 64)
    T1 = T // 2
    if Q > 1 and T1 % Q == 0 and T1 > 1:
        T1 -= 1
    T2 = T - T1
    c.what = f"tokens [0, {T1}) then [{T1}, {T}) with the state handed over (a chunked prefill of T = {T})"
    state_in = {i for i, _ in s["states"]}
    state_out = {o for _, o in s["states"]}
    for part, (t0, n) in enumerate(((0, T1), (T1, T2))):
        case = dict(g.case)
        case["T"] = n
        if part == 1 and s.get("flag"):
            case[s["flag"]] = True
        r = _base_run(g, f"tokens [{t0}, {t0 + n})", -1, case)
        for name, a in g.inputs.items():
            if name in state_in and part == 1:
                continue
            ax = _ax(g.axes[name], "T")
            r.inputs[name] = _take(a, ax, range(t0, t0 + n)) if ax >= 0 else a
            r.input_dtypes[name], r.axes[name] = g.input_dtypes[name], g.axes[name]
        if part == 1:
            for i, o in s["states"]:
                r.inputs[i] = None
                r.input_dtypes[i] = g.input_dtypes.get(i, g.outputs[o].dtype)
                r.axes[i] = g.outputs[o].axes
                r.handovers.append((i, o, 0))
        for name, o in g.outputs.items():
            ax = _ax(o.axes, "T")
            r.outputs[name] = _spec_with(o, _with_dim(o.shape, ax, n)) if ax >= 0 else o
            if ax >= 0:
                r.places.append((name, name, ax, 0, t0, n))
            elif name in state_out and part == 1:
                r.places.append((name, name, 0, 0, 0, o.shape[0] if o.shape else 1))
        c.runs.append(r)
    placed = {p[1] for r in c.runs for p in r.places}
    c.notes += [f"output '{n}' has no T axis and is no handed-over state: not covered" for n in g.outputs if n not in placed]
    out.append(c)


def _lengths(g, s):
    if s.get("pack") == "seqlens":
        return [int(x) for x in g.case.get("seqlens", []) or []]
    cu = g.case.get("cu_seqlens", []) or []
    return [int(cu[i]) - int(cu[i - 1]) for i in range(1, len(cu))]


def _plan_varlen(g, s, out):
    c = Check("varlen", "varlen", "every packed sequence run as a dense case of its own")
    lens = _lengths(g, s) if s else []
    if s is None or not s.get("pack"):
        c.not_applicable = f"op {g.op}: no varlen relation yet"
    elif not _packed(g, s) or not lens:
        c.not_applicable = "not a packed (varlen) case"
    elif int(g.case.get("B", 1)) != 1:
        c.not_applicable = "a packed case with B > 1"
    if c.not_applicable:
        out.append(c)
        return
    last = max((i for i, n in enumerate(lens) if n > 0), default=-1)
    state_in = {i for i, _ in s["states"]}
    state_out = {o for _, o in s["states"]}
    start = 0
    for si, n in enumerate(lens):
        t0 = start
        start += n
        if n == 0:
            c.notes.append(f"sequence {si} is empty: not run (a kernel call needs a token), its states not covered")
            continue
        case = dict(g.case)
        case.update(T=n, B=1)
        case["seqlens" if s["pack"] == "seqlens" else "cu_seqlens"] = []
        if "varlen_states" in case:
            case["varlen_states"] = False  # ssd: a dense case has none
        r = _base_run(g, f"sequence {si} (tokens [{t0}, {t0 + n})) as a dense case", si, case)
        has_state = False
        for name, a in g.inputs.items():
            if name in s["pack_inputs"]:
                continue
            if name in state_in:
                if s["per_seq"]:
                    r.inputs[name] = _take(a, 0, [si])
                    r.axes[name] = ("B",) + tuple(g.axes[name][1:])
                    r.input_dtypes[name] = g.input_dtypes[name]
                    has_state = True
                elif si == 0:
                    r.inputs[name], r.axes[name], r.input_dtypes[name] = a, g.axes[name], g.input_dtypes[name]
                    has_state = True
                continue
            ax = _ax(g.axes[name], "T")
            r.inputs[name] = _take(a, ax, range(t0, t0 + n)) if ax >= 0 else a
            r.input_dtypes[name], r.axes[name] = g.input_dtypes[name], g.axes[name]
        if s.get("flag"):
            case[s["flag"]] = has_state
        for name, o in g.outputs.items():
            if name == s.get("packed_final"):
                continue
            ax = _ax(o.axes, "T")
            if ax >= 0:
                r.outputs[name] = _spec_with(o, _with_dim(o.shape, ax, n))
                r.places.append((name, name, ax, 0, t0, n))
            elif name in state_out and s["per_seq"]:
                r.outputs[name] = _spec_with(o, _with_dim(o.shape, 0, 1), ("B",) + tuple(o.axes[1:]))
                r.places.append((name, name, 0, 0, si, 1))
            elif name in state_out:
                r.outputs[name] = o
                if s.get("packed_final") and s["packed_final"] in g.outputs:
                    r.places.append((name, s["packed_final"], 0, 0, si, 1))
                if si == last:
                    r.places.append((name, name, 0, 0, 0, 1))
            else:
                r.outputs[name] = o
        c.runs.append(r)
    out.append(c)


def layout_parents(g, layout_offset: int) -> dict:
    """The layout check's parents, from shapes only: dtype name -> dict(width=W, members={input:
    (column offset, columns)}, shape=(B, T, W), last_offset=the largest element offset of a member).
    Every dense input whose axes start with (B, T) is a member of its dtype's parent."""
    groups = {}
    for n, a in g.inputs.items():
        ax = g.axes[n]
        if len(ax) >= 2 and ax[0] == "B" and ax[1] == "T" and a.size > 0:
            groups.setdefault(g.input_dtypes[n], []).append(n)
    out = {}
    for d, names in sorted(groups.items()):
        B, T = g.inputs[names[0]].shape[:2]
        members, col = {}, 0
        for n in sorted(names):
            cols = int(np.prod(g.inputs[n].shape[2:], dtype=np.int64)) if g.inputs[n].ndim > 2 else 1
            members[n] = (col, cols)
            col += cols
        W = col + 1  # one spare column: every member is a strided view, even alone in its dtype
        if layout_offset:
            # Row r starts at offset r * W: from row 7/8 * B * T on (so any chunk start in the last
            # eighth of the rows, where a kernel's row-times-stride product is largest) it passes the offset.
            row = max(1, (B * T * 7) // 8)
            W = max(W, -(-layout_offset // row))
        last = max((B - 1) * T * W + (T - 1) * W + c0 + cols - 1 for c0, cols in members.values())
        out[d] = dict(width=W, members=members, shape=(B, T, W), last_offset=last)
    return out


def _plan_layout(g, s, layout_offset, out):
    c = Check("layout", "layout")
    parents = layout_parents(g, layout_offset)
    if not parents:
        c.not_applicable = "no dense input with leading axes (B, T) to hand as a view"
        out.append(c)
        return
    desc = "; ".join(f"{d}: {', '.join(p['members'])} in [B, T, {p['width']}] (last offset {p['last_offset']})"
                     for d, p in parents.items())
    c.what = f"the inputs as strided views of wider parents ({desc})"
    r = _base_run(g, "the case with strided inputs", -1, g.case)
    for n, a in g.inputs.items():
        r.inputs[n], r.input_dtypes[n], r.axes[n] = a, g.input_dtypes[n], g.axes[n]
    r.outputs = dict(g.outputs)
    r.places = [(n, n, 0, 0, 0, o.shape[0] if o.shape else 1) for n, o in g.outputs.items()]
    r.layout_offset = layout_offset
    c.runs.append(r)
    out.append(c)


def plan(g, families=FAMILIES, batch_invariant: bool = False, layout_offset: int = 1 << 31) -> list:
    """The checks of ``families`` (a subset of :data:`FAMILIES`) for golden ``g``, in that order."""
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise AssayError(f"relations {bad}: expected any of {', '.join(FAMILIES)}")
    s = _spec(g.op)
    out = []
    for f in FAMILIES:
        if f not in families:
            continue
        n0 = len(out)
        if f == "batch":
            _plan_batch(g, s, batch_invariant, out)
        elif f == "continuation":
            _plan_continuation(g, s, out)
        elif f == "varlen":
            _plan_varlen(g, s, out)
        else:
            _plan_layout(g, s, layout_offset, out)
        for c in out[n0:]:
            if g.case.get("backward") and not c.not_applicable:
                c.not_applicable = "a backward case: relations check forward outputs"
            # The layout check runs the whole case once, so its outputs are judged wherever the golden
            # has expected values (a sampled golden: at the sampled elements); the others reassemble
            # whole outputs from derived cases, element by element.
            if getattr(g, "sample", None) is not None and not c.not_applicable and f != "layout":
                c.not_applicable = ("a sampled golden: relations judge whole outputs element by element, and it keeps "
                                    "only some (golden/SCHEMA.md \"Sampled outputs\")")
            if c.not_applicable:
                c.runs = []
    return out


class RelatedGolden:
    """What a kernel sees of a related run: the attributes of :class:`assay.golden.Golden` that
    describe the case (``op``, ``case_name``, ``level``, ``case``, ``inputs``, ``input_dtypes``,
    ``inputs_f64``, ``axes``, ``outputs``, ``to_torch``, ``to_jax``), no expected values.
    ``relation`` and ``label`` say which check and run it is. In the layout check, ``inputs`` and
    ``to_torch`` hand the (B, T)-leading inputs as views of wider parents."""

    def __init__(self, g, check: Check, run: _Run, inputs: dict):
        self.path = None
        self.op, self.case_name, self.level = g.op, g.case_name, g.level
        self.provenance = dict(getattr(g, "provenance", {}))
        self.relation, self.label = check.name, run.label
        self.case = dict(run.case)
        self.input_dtypes = dict(run.input_dtypes)
        self.axes = dict(run.axes)
        self.axes.update({n: o.axes for n, o in run.outputs.items()})
        self.outputs = dict(run.outputs)
        self.intermediates, self.intermediate_shapes = {}, {}
        self._layout = run.layout_offset
        self._dense = inputs
        self.inputs = inputs
        if self._layout is not None:
            self.inputs = self._strided_numpy()
        self._f64 = None

    def _parents(self):
        if self._layout is None:
            return {}
        shim = type("Shapes", (), {})()
        shim.inputs, shim.input_dtypes, shim.axes = self._dense, self.input_dtypes, self.axes
        return layout_parents(shim, self._layout)

    def _strided_numpy(self):
        out = dict(self._dense)
        for d, p in self._parents().items():
            parent = np.empty(p["shape"], dtype=self._dense[next(iter(p["members"]))].dtype)  # never filled: lazy pages
            for n, (c0, cols) in p["members"].items():
                a = self._dense[n]
                v = parent[:, :, c0:c0 + cols]
                v[...] = a.reshape(a.shape[0], a.shape[1], cols)
                out[n] = v.reshape(a.shape)  # a view: the member's trailing axes are contiguous columns
        return out

    @property
    def inputs_f64(self) -> dict:
        if self._f64 is None:
            self._f64 = {n: dtypes.to_float64(np.asarray(a)) for n, a in self.inputs.items()}
        return self._f64

    def to_torch(self, device=None, names=None) -> dict:
        """As :meth:`assay.golden.Golden.to_torch`; in the layout check the (B, T)-leading inputs are
        views into parents [B, T, W] allocated on ``device`` with torch.empty."""
        import torch

        from .golden import Golden

        names = list(names) if names is not None else list(self._dense)
        shim = Golden.__new__(Golden)
        shim.path, shim.inputs, shim.input_dtypes = f"{self.op}/{self.case_name}@{self.relation}", self._dense, self.input_dtypes
        dense = Golden.to_torch(shim, device=device, names=names)
        for d, p in self._parents().items():
            members = [n for n in p["members"] if n in dense]
            if not members:
                continue
            t0 = dense[members[0]]
            parent = torch.empty(p["shape"], dtype=t0.dtype, device=t0.device)
            for n in members:
                c0, cols = p["members"][n]
                t = dense[n]
                v = parent[:, :, c0:c0 + cols]
                v.copy_(t.reshape(t.shape[0], t.shape[1], cols))
                dense[n] = v.view(t.shape) if cols == t.shape[2:].numel() and t.dim() == 3 else v.unflatten(2, tuple(t.shape[2:]))
        return dense

    def to_jax(self, names=None) -> dict:
        import jax.numpy as jnp

        return {n: jnp.asarray(self._dense[n]) for n in (names if names is not None else self._dense)}

    def __repr__(self) -> str:
        return f"<RelatedGolden {self.op}/{self.case_name}@{self.relation} {self.label}>"


def _values(a, spec: OutputSpec, where: str) -> np.ndarray:
    """A kernel's output as float64 values of the output's dtype (codes decoded)."""
    arr, dt = _candidate._prepare_output(a, spec, where)
    if dt is not None:  # codes of an 8-bit or narrower format
        return dtypes.to_float64(dtypes.view_codes(arr, dtypes.get(dt)))
    return np.asarray(arr, dtype=np.float64)


def _encode_input(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float64 values as an array of the input dtype (round to nearest even where it is narrower)."""
    d = dtypes.get(dtype)
    if d.numpy is None:
        raise AssayError(f"a handed-over state of dtype {dtype}: this ml_dtypes cannot hold it")
    return np.asarray(values, dtype=np.float64).astype(d.numpy)


def run_check(fn, g, check: Check, base_outputs: dict, path, bitwise: bool | None = None) -> str:
    """Runs every run of ``check`` through ``fn``, reassembles the outputs in the golden's shapes and
    writes the relation candidate ``path`` (verify/run/relations.h judge_relation_file). A kernel that
    raises, or returns what cannot be written, gives a relation candidate with status "error" (the row
    is Failed); ``assay.NotSupported`` gives "not_supported". Returns the status."""
    from .errors import NotSupported

    bitwise = check.bitwise if bitwise is None else bitwise
    status, message = "ok", ""
    vals = {n: np.zeros(o.shape, dtype=np.float64) for n, o in g.outputs.items()}
    run_idx = {n: np.zeros(o.shape, dtype=np.int32) for n, o in g.outputs.items()}
    outs = []
    if check.not_applicable:
        status, message = "not_applicable", check.not_applicable
    for ri, r in enumerate(check.runs if status == "ok" else []):
        inputs = dict(r.inputs)
        for i, o, src in r.handovers:
            inputs[i] = _encode_input(outs[src][o], r.input_dtypes[i])
        rg = RelatedGolden(g, check, r, inputs)
        try:
            res = fn(rg)
            res = res[0] if isinstance(res, tuple) and len(res) == 2 else res
            if not isinstance(res, dict):
                raise AssayError(f"outputs must be a dict name -> array, got {type(res).__name__}")
            got = {}
            for n, spec in r.outputs.items():
                if n not in res:
                    raise AssayError(f"output '{n}' is missing")
                got[n] = _values(res[n], spec, f"{r.label}: output '{n}'")
        except KeyboardInterrupt:
            raise
        except NotSupported as e:
            status, message = "not_supported", f"{r.label}: {e}"
            break
        except BaseException as e:  # noqa: BLE001 (the kernel's failure is the row's verdict)
            from ._worker import describe

            status, message = "error", f"{r.label}: {describe(e)}"
            break
        outs.append(got)
        for ro, go, ax, s0, d0, n in r.places:
            src = np.take(got[ro], np.arange(s0, s0 + n), axis=ax)
            dst = [slice(None)] * vals[go].ndim
            dst[ax] = slice(d0, d0 + n)
            vals[go][tuple(dst)] = src
            run_idx[go][tuple(dst)] = ri + 1
    # Uncovered elements hold the case's own values (never judged: /relation/run is 0 there).
    write_vals = {}
    for n in g.outputs:
        base = np.asarray(base_outputs[n], dtype=np.float64) if n in base_outputs else np.zeros(g.outputs[n].shape)
        write_vals[n] = np.where(run_idx[n] > 0, vals[n], base)
    _candidate.write(path, g, write_vals)
    with h5py.File(path, "r+") as f:
        f.attrs["relation"] = check.name
        f.attrs["relation_what"] = check.what
        f.attrs["relation_status"] = status
        f.attrs["relation_message"] = " ".join(str(message).split())
        f.attrs["relation_bitwise"] = "1" if bitwise else "0"
        f.attrs["relation_runs"] = json.dumps([[r.label, int(r.sequence)] for r in check.runs])
        f.attrs["relation_notes"] = json.dumps(list(check.notes))
        grp = f.create_group("relation/run")
        for n, a in run_idx.items():
            off = g.sample_offsets(n) if getattr(g, "sample", None) is not None else None
            grp.create_dataset(n, data=a if off is None else a.reshape(-1)[off])  # sampled: at the kept elements
    return status


def read_outputs(path, g) -> dict:
    """A candidate's outputs as float64 arrays (the case's own run, for the relation candidates'
    uncovered elements)."""
    out = {}
    if not os.path.isfile(path):
        return out
    with h5py.File(path, "r") as f:
        for n, o in g.outputs.items():
            ds = f.get(f"outputs/{n}")
            if isinstance(ds, h5py.Dataset) and ds.dtype.kind == "f" and tuple(ds.shape) == o.shape:
                out[n] = ds[()].astype(np.float64)
    return out
