#!/usr/bin/env python3
"""Time the assay fp64 oracles against PyTorch fp64 CPU references, at 1 and N threads.

Runs build/bin/bench_oracles (reference/bench/bench_oracles.cpp) with --benchmark_filter and
--benchmark_format=json under OMP_NUM_THREADS=t, then the torch references below at the same
shapes (read from each benchmark's label) with torch.set_num_threads(t), and prints

  | oracle (shape) | torch reference | 1 thread: assay / torch | N threads: assay / torch |

with the ratio assay time / torch time (< 1: the oracle is faster), then the oracles' scaling from
the fewest to the most threads. --repeat N runs N rounds (each round: every thread count, the
bench binary then the torch references right after it) and prints medians: single-thread speed
on shared VMs drifts between repeats, and a round keeps both sides of a ratio close in time. The torch references were
written for this project (not copied from upstream), each in the algorithm shape people use as
"the PyTorch fp64 reference":
  * SDPA through the math backend (sdpa_kernel(SDPBackend.MATH)), forward, and its autograd
    backward;
  * a chunked SSD (the shape of mamba's ssd_minimal_discrete: stable segment sums, intra-chunk
    block, chunk states, state passing through the chunk-level segsum, state to output), with the
    oracle's dt processing (softplus(dt + dt_bias)), D skip and z gate; backward by autograd;
  * a chunked gated delta rule (the shape of fla's naive_chunk_gated_delta_rule: per chunk the
    WY/UT transform T = (I + A)^-1 by a triangular solve, then a sequential pass over the chunks
    carrying the state), with the qk l2norm; backward by autograd;
  * a recurrent gated delta rule (a token loop).
Mamba-3 has no torch reference here: its rows show the oracle alone.

Cross-check (before timing, unless --no-crosscheck): bench_oracles --assay_crosscheck=FILE writes
tiny cases (inputs and the ground-truth oracle outputs); every torch reference is run on those
inputs and must agree to 1e-10 (assay's agreement_rel), or the script exits 1 after the table.

Exit codes: 0, 1 (a cross-check disagreed), 2 (usage: no torch, no bench binary, a failed run).
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

# bench_oracles' machine ceilings (no oracle, no torch row): name -> (what, unit of its rate).
CEILINGS = {"BM_fma_peak": ("fp64 FMA in registers", "GFLOP/s"), "BM_triad": ("memory triad", "GB/s")}

# Benchmark (without the /full or /quick suffix) -> (row name, torch reference key or None).
ROWS = [
    ("BM_dgemm", "dgemm (Eigen MatrixXd product)", "mm"),
    ("BM_attention_fwd_definitional", "attention forward_definitional", "sdpa_fwd"),
    ("BM_attention_fwd_online", "attention forward_online", "sdpa_fwd"),
    ("BM_attention_bwd_definitional", "attention backward_definitional", "sdpa_bwd"),
    ("BM_attention_bwd_tiled", "attention backward_tiled", "sdpa_bwd"),
    ("BM_ssd_recurrence", "ssd::recurrence", "ssd_chunked"),
    ("BM_ssd_chunked", "ssd::chunked", "ssd_chunked"),
    ("BM_ssd_bwd_recurrent", "ssd::backward_recurrent", "ssd_chunked_bwd"),
    ("BM_ssd_bwd_chunked", "ssd::backward_chunked", "ssd_chunked_bwd"),
    ("BM_gated_delta_recurrent", "gated_delta::recurrent", "gdn_recurrent"),
    ("BM_gated_delta_chunked", "gated_delta::chunked", "gdn_chunked"),
    ("BM_gated_delta_bwd_recurrent", "gated_delta::backward_recurrent", "gdn_chunked_bwd"),
    ("BM_gated_delta_bwd_chunked", "gated_delta::backward_chunked", "gdn_chunked_bwd"),
    ("BM_mamba3_siso_step", "mamba3::siso_step", None),
    ("BM_mamba3_siso_chunked", "mamba3::siso_chunked", None),
]
TORCH_NAMES = {
    "mm": "torch.mm",
    "sdpa_fwd": "SDPA math fwd",
    "sdpa_bwd": "SDPA math bwd (autograd)",
    "ssd_chunked": "chunked SSD",
    "ssd_chunked_bwd": "chunked SSD bwd (autograd)",
    "gdn_recurrent": "recurrent GDN (token loop)",
    "gdn_chunked": "chunked GDN (WY/UT)",
    "gdn_chunked_bwd": "chunked GDN bwd (autograd)",
}
CROSSCHECK_LIMIT = 1e-10


def die(msg, code=2):
    print(f"bench_oracles_vs_torch: {msg}", file=sys.stderr)
    sys.exit(code)


# ------------------------------------------------------------------------------------------------
# torch references (fp64, CPU). Layouts are the oracles' (reference/<op>/<op>.h).

def make_refs(torch):
    F = torch.nn.functional

    def sdpa(q, k, v):
        """q, k, v [B, S, H, D] -> o [B, S, H, D] through SDPA's math backend."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return o.transpose(1, 2)

    def segsum(a):
        """a [..., L] -> [..., L, L] with out[i, j] = sum_{r=j+1..i} a_r for i >= j (0 on the
        diagonal) and -inf above it; built by a masked cumulative sum (no cumsum differences)."""
        L = a.shape[-1]
        rows = a.unsqueeze(-1).expand(*a.shape, L)  # rows[..., r, j] = a_r
        strict = torch.ones(L, L, dtype=torch.bool, device=a.device).tril(-1)
        s = rows.masked_fill(~strict, 0.0).cumsum(-2)
        return s.masked_fill(~strict.logical_or(torch.eye(L, dtype=torch.bool, device=a.device)), -math.inf)

    def ssd_chunked(x, dt, A, B, C, D, z, dt_bias, Q):
        """Chunked SSD. x, z [b, T, h, p]; dt [b, T, h] raw; A, D, dt_bias [h]; B, C [b, T, g, n].
        Returns out [b, T, h, p] = (y + D x) * silu(z) and the final state [b, h, p, n]."""
        b, T, h, p = x.shape
        g, n = B.shape[2], B.shape[3]
        delta = F.softplus(dt + dt_bias)  # threshold 20, as the oracle; dt_limit (0, inf) is a no-op
        Bh, Ch = B.repeat_interleave(h // g, dim=2), C.repeat_interleave(h // g, dim=2)
        pad = (-T) % Q  # padded tokens: delta = 0 (no decay, no input)
        xs = x * delta[..., None]
        if pad:
            xs, delta = F.pad(xs, (0, 0, 0, 0, 0, pad)), F.pad(delta, (0, 0, 0, pad))
            Bh, Ch = F.pad(Bh, (0, 0, 0, 0, 0, pad)), F.pad(Ch, (0, 0, 0, 0, 0, pad))
        nc = (T + pad) // Q
        X = xs.reshape(b, nc, Q, h, p)
        Bc, Cc = Bh.reshape(b, nc, Q, h, n), Ch.reshape(b, nc, Q, h, n)
        a = (delta * A).reshape(b, nc, Q, h).permute(0, 3, 1, 2)  # [b, h, c, l]
        acum = a.cumsum(-1)
        # intra-chunk: Y_diag[l] = sum_{s <= l} exp(seg(l, s)) (C_l . B_s) X_s
        CB = torch.einsum("bclhn,bcshn->bhcls", Cc, Bc)
        y = torch.einsum("bhcls,bcshp->bclhp", CB * torch.exp(segsum(a)), X)
        # chunk states: st_c = sum_s exp(acum_last - acum_s) X_s (x) B_s
        states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, torch.exp(acum[..., -1:] - acum), X)
        # state passing over chunks (chunk-level segment sums), the first start state is 0
        states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
        passing = torch.exp(segsum(F.pad(acum[..., -1], (1, 0))))  # [b, h, c+1, c+1]
        states = torch.einsum("bhzc,bchpn->bzhpn", passing, states)
        start, final = states[:, :-1], states[:, -1]
        # state to output: Y_off[l] = exp(acum_l) C_l . S_start
        y = y + torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, start, torch.exp(acum))
        y = y.reshape(b, nc * Q, h, p)[:, :T]
        return (y + D[:, None] * x) * F.silu(z), final

    def l2n(t):
        return t * torch.rsqrt((t * t).sum(-1, keepdim=True) + 1e-6)  # fla's l2norm, eps in the sqrt

    def gdn_chunked(q, k, v, g, beta, Q):
        """Chunked gated delta rule. q, k [b, T, h, K]; v [b, T, h, V]; g (log decay), beta
        [b, T, h]; qk l2norm, scale K^-1/2. Returns o [b, T, h, V] and the final state [b, h, K, V]."""
        b, T, h, K = q.shape
        V = v.shape[-1]
        q, k = l2n(q) * K ** -0.5, l2n(k)
        pad = (-T) % Q  # padded tokens: k = v = 0, g = 0, beta = 0
        q, k, v, g, beta = (t.transpose(1, 2) for t in (q, k, v, g, beta))  # [b, h, T, ..]
        if pad:
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
            g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
        nc = (T + pad) // Q
        q, k, v = q.reshape(b, h, nc, Q, K), k.reshape(b, h, nc, Q, K), v.reshape(b, h, nc, Q, V)
        G = g.reshape(b, h, nc, Q).cumsum(-1)
        beta = beta.reshape(b, h, nc, Q, 1)
        lower = torch.ones(Q, Q, dtype=torch.bool).tril()
        E = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~lower, -math.inf))  # exp(G_i - G_j), i >= j
        kb = k * beta
        A = (kb @ k.transpose(-1, -2) * E).tril(-1)  # beta_i (k_i . k_j) exp(G_i - G_j), i > j
        eye = torch.eye(Q, dtype=q.dtype).expand_as(A)
        Tm = torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)  # (I + A)^-1
        u = Tm @ (v * beta)
        w = Tm @ (kb * torch.exp(G)[..., None])
        S = q.new_zeros(b, h, K, V)
        outs = []
        for c in range(nc):  # sequential state pass
            qc, kc, Gc = q[:, :, c], k[:, :, c], G[:, :, c]
            v_new = u[:, :, c] - w[:, :, c] @ S
            outs.append((qc * torch.exp(Gc)[..., None]) @ S + (qc @ kc.transpose(-1, -2) * E[:, :, c]) @ v_new)
            last = Gc[..., -1:]
            S = S * torch.exp(last)[..., None] + (kc * torch.exp(last - Gc)[..., None]).transpose(-1, -2) @ v_new
        o = torch.stack(outs, dim=2).reshape(b, h, nc * Q, V)[:, :, :T].transpose(1, 2)
        return o, S

    def gdn_recurrent(q, k, v, g, beta):
        """Token-by-token gated delta rule, decay first (same tensors as gdn_chunked)."""
        b, T, h, K = q.shape
        q, k = l2n(q) * K ** -0.5, l2n(k)
        S = q.new_zeros(b, h, K, v.shape[-1])
        ea = torch.exp(g)
        outs = []
        for t in range(T):
            S = S * ea[:, t, :, None, None]
            kt = k[:, t]
            m = torch.einsum("bhk,bhkv->bhv", kt, S)
            delta = beta[:, t, :, None] * (v[:, t] - m)
            S = S + kt[..., None] * delta[..., None, :]
            outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
        return torch.stack(outs, dim=1), S

    return {"sdpa": sdpa, "ssd_chunked": ssd_chunked, "gdn_chunked": gdn_chunked,
            "gdn_recurrent": gdn_recurrent}


# ------------------------------------------------------------------------------------------------
# Timing

def time_fn(fn, min_time):
    """fn() runs one unit and returns the seconds of its timed part. Slow units (>= 2 s) are
    timed once, as bench_oracles does; faster ones are warmed up once, then repeated for at least
    min_time seconds. Returns the mean seconds per unit."""
    first = fn()
    if first >= 2.0:
        return first
    runs = []
    while sum(runs) < min_time or not runs:
        runs.append(fn())
    return sum(runs) / len(runs)


def wall(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def torch_timer(torch, refs, key, shape):
    """A function running the torch reference `key` once at `shape` (a dict from the label) and
    returning its timed seconds. Inputs are made once, with the oracles' distributions."""
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(0)
    d = torch.float64

    def randn(*s):
        return torch.randn(*s, generator=gen, dtype=d)

    def unif(lo, hi, *s):
        return lo + (hi - lo) * torch.rand(*s, generator=gen, dtype=d)

    def forward(ref, *args):  # one timed call of ref(*args), without autograd
        def run():
            with torch.inference_mode():
                return wall(lambda: ref(*args))
        return run

    def backward(ref, args, extra, grad_out):
        # ref(*leaves, *extra) untimed on fresh leaves (copies of args requiring grad); timed: the
        # backward of its (first) output with grad_out.
        def run():
            leaves = [t.clone().requires_grad_() for t in args]
            out = ref(*leaves, *extra)
            out = out[0] if isinstance(out, tuple) else out
            return wall(lambda: out.backward(grad_out))
        return run

    if key == "mm":
        n = shape["N"]
        a, b_ = randn(n, n), randn(n, n)
        return lambda: wall(lambda: torch.mm(a, b_))
    if key in ("sdpa_fwd", "sdpa_bwd"):
        B, H, S, D = shape["B"], shape["H"], shape["S"], shape["D"]
        q, k, v, do = randn(B, S, H, D), randn(B, S, H, D), randn(B, S, H, D), randn(B, S, H, D)
        if key == "sdpa_fwd":
            return forward(refs["sdpa"], q, k, v)
        return backward(refs["sdpa"], [q, k, v], (), do)
    if key in ("ssd_chunked", "ssd_chunked_bwd"):
        B, T, H, P, N, G, Q = (shape[c] for c in ("B", "T", "H", "P", "N", "G", "Q"))
        x, z, dt = randn(B, T, H, P), randn(B, T, H, P), randn(B, T, H)
        A, Dp, dt_bias = unif(-1.0, -0.05, H), randn(H), unif(-3.0, -1.0, H)
        Bm, Cm, dout = randn(B, T, G, N), randn(B, T, G, N), randn(B, T, H, P)
        args = [x, dt, A, Bm, Cm, Dp, z, dt_bias]
        if key == "ssd_chunked":
            return forward(refs["ssd_chunked"], *args, Q)
        return backward(refs["ssd_chunked"], args, (Q,), dout)
    if key in ("gdn_chunked", "gdn_recurrent", "gdn_chunked_bwd"):
        B, T, H, K, V, Q = (shape[c] for c in ("B", "T", "H", "K", "V", "Q"))
        q, k, v = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V)
        g, beta, do = unif(-1.0, 0.0, B, T, H), unif(0.0, 1.0, B, T, H), randn(B, T, H, V)
        args = [q, k, v, g, beta]
        if key == "gdn_recurrent":
            return forward(refs["gdn_recurrent"], *args)
        if key == "gdn_chunked":
            return forward(refs["gdn_chunked"], *args, Q)
        return backward(refs["gdn_chunked"], args, (Q,), do)
    raise KeyError(key)


# ------------------------------------------------------------------------------------------------
# bench_oracles

UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_label(label):
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", label or "")}


def run_bench(bench, filt, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    print(f"[bench_oracles, OMP_NUM_THREADS={threads}, filter {filt}]", file=sys.stderr, flush=True)
    r = subprocess.run([bench, f"--benchmark_filter={filt}", "--benchmark_format=json"], env=env,
                       stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        die(f"{bench} exited {r.returncode} (OMP_NUM_THREADS={threads})")
    try:
        data = json.loads(r.stdout)
    except json.JSONDecodeError:  # e.g. "Failed to match any benchmarks" (printed as text)
        die(f"{bench}: no benchmark output for filter {filt!r} (OMP_NUM_THREADS={threads}); check --filter")
    runs = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        base = b["name"].split("/")[0]
        runs[base] = {"name": b["name"], "seconds": b["real_time"] * UNIT_S[b["time_unit"]],
                      "label": b.get("label", ""), "gflops": b.get("GFLOP/s"),
                      "of_dgemm": b.get("of_dgemm"), "gbps": b.get("GB/s")}
    return data.get("context", {}), runs


# ------------------------------------------------------------------------------------------------
# Cross-check

def agreement_rel(a, b):
    """assay's agreement_rel: max_i |a_i - b_i| / max(|b_i|, rms(b))."""
    a, b = a.reshape(-1), b.reshape(-1)
    if b.numel() == 0:
        return 0.0
    rms = b.pow(2).mean().sqrt()
    return float(((a - b).abs() / b.abs().clamp_min(rms)).max())


def crosscheck(torch, refs, bench):
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "cases.json")
        r = subprocess.run([bench, f"--assay_crosscheck={path}"])
        if r.returncode != 0:
            die(f"{bench} --assay_crosscheck exited {r.returncode}")
        with open(path) as f:
            cases = json.load(f)

    def t(case, name, *shape):
        return torch.tensor(case["inputs"][name], dtype=torch.float64).reshape(*shape)

    def out(case, name, *shape):
        return torch.tensor(case["outputs"][name], dtype=torch.float64).reshape(*shape)

    res = {}
    with torch.inference_mode():
        c = cases["attention"]
        s = c["shape"]
        shp = (s["B"], s["S"], s["H"], s["D"])
        o = refs["sdpa"](t(c, "q", *shp), t(c, "k", *shp), t(c, "v", *shp))
        res["SDPA math: o"] = agreement_rel(o, out(c, "o", *shp))

        c = cases["ssd"]
        s = c["shape"]
        B, T, H, P, N, G, Q = (s[k] for k in ("B", "T", "H", "P", "N", "G", "Q"))
        y, fin = refs["ssd_chunked"](t(c, "x", B, T, H, P), t(c, "dt", B, T, H), t(c, "A", H),
                                     t(c, "B", B, T, G, N), t(c, "C", B, T, G, N), t(c, "D", H),
                                     t(c, "z", B, T, H, P), t(c, "dt_bias", H), Q)
        res["chunked SSD: out"] = agreement_rel(y, out(c, "out", B, T, H, P))
        res["chunked SSD: final_states"] = agreement_rel(fin, out(c, "final_states", B, H, P, N))

        c = cases["gated_delta"]
        s = c["shape"]
        B, T, H, K, V, Q = (s[k] for k in ("B", "T", "H", "K", "V", "Q"))
        args = (t(c, "q", B, T, H, K), t(c, "k", B, T, H, K), t(c, "v", B, T, H, V),
                t(c, "g", B, T, H), t(c, "beta", B, T, H))
        for name, (o, fin) in (("chunked GDN", refs["gdn_chunked"](*args, Q)),
                               ("recurrent GDN", refs["gdn_recurrent"](*args))):
            res[f"{name}: o"] = agreement_rel(o, out(c, "o", B, T, H, V))
            res[f"{name}: final_state"] = agreement_rel(fin, out(c, "final_state", B, H, K, V))
    return res


# ------------------------------------------------------------------------------------------------

def fmt_s(sec):
    if sec is None:
        return "-"
    return f"{sec * 1e3:.1f} ms" if sec < 1 else f"{sec:.2f} s"


def main():
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/bin/bench_oracles", help="the bench_oracles binary")
    ap.add_argument("--threads", default=f"1,{nproc}", help="thread counts, comma separated")
    ap.add_argument("--quick", action="store_true", help="the small shapes (NAME/quick), a smoke run")
    ap.add_argument("--json", metavar="FILE", help="also write every number as JSON to FILE")
    ap.add_argument("--filter", default="", help="regex restricting the benchmarks (e.g. gated_delta)")
    ap.add_argument("--no-crosscheck", action="store_true", help="skip the tiny-case cross-check")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of (every thread count: bench_oracles, then torch); cells are medians")
    args = ap.parse_args()

    try:
        import torch
    except ImportError:
        die("torch is not installed (pip install torch; the CPU wheel is enough)")
    if not os.access(args.bench, os.X_OK):
        die(f"{args.bench}: no such executable (cmake --build build --target bench_oracles)")
    try:
        threads = list(dict.fromkeys(int(x) for x in args.threads.split(",") if x.strip()))
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        die(f"--threads {args.threads!r}: need a comma-separated list of positive integers")
    if args.repeat < 1:
        die(f"--repeat {args.repeat}: need a positive integer")
    refs = make_refs(torch)
    mode = "quick" if args.quick else "full"
    filt = (f"{args.filter}.*" if args.filter else "") + f"/{mode}(/|$)"
    min_time = 0.1 if args.quick else 0.5

    failed = False
    xres = {}
    if not args.no_crosscheck:
        xres = crosscheck(torch, refs, args.bench)
        worst = max(xres.values())
        failed = not worst <= CROSSCHECK_LIMIT
        print("cross-check, torch reference vs assay oracle on tiny cases (agreement_rel, limit "
              f"{CROSSCHECK_LIMIT:g}): " + ", ".join(f"{k} {v:.1e}" for k, v in xres.items())
              + (" FAILED" if failed else " OK"))

    # Rounds: every thread count in turn, bench_oracles then the torch references right after it,
    # so that a slow phase of the machine (these VMs' single-thread speed drifts by up to 1.5x)
    # hits both sides of a ratio; with --repeat N each cell is the median of N rounds.
    samples = {}  # (base, threads) -> list of per-round entries
    ceil = {}  # (machine ceiling benchmark, threads) -> its rate in each round
    contexts = {}
    for rnd in range(args.repeat):
        for nt in threads:
            ctx, runs = run_bench(args.bench, filt, nt)
            contexts[nt] = ctx
            for base in CEILINGS:
                if base in runs:
                    ceil.setdefault((base, nt), []).append(runs[base]["gflops"] or runs[base]["gbps"])
            torch.set_num_threads(nt)
            torch_cache = {}
            for base, row_name, key in ROWS:
                if base not in runs:
                    continue
                run = runs[base]
                tsec = None
                if key is not None:
                    ck = (key, run["label"])
                    if ck not in torch_cache:
                        print(f"[torch {TORCH_NAMES[key]}, {nt} thread(s), {run['label']}, round {rnd + 1}]",
                              file=sys.stderr, flush=True)
                        torch_cache[ck] = time_fn(torch_timer(torch, refs, key, parse_label(run["label"])), min_time)
                    tsec = torch_cache[ck]
                samples.setdefault((base, nt), []).append({
                    "bench": run["name"], "shape": run["label"], "assay_s": run["seconds"], "torch_s": tsec,
                    "gflops": run["gflops"], "of_dgemm": run["of_dgemm"]})
    table = {}  # base name -> {threads: {...}} (medians over the rounds)
    for (base, nt), ents in samples.items():
        med = lambda k: statistics.median(e[k] for e in ents) if all(e[k] is not None for e in ents) else None
        a, t = med("assay_s"), med("torch_s")
        table.setdefault(base, {})[nt] = {
            "bench": ents[0]["bench"], "shape": ents[0]["shape"], "assay_s": a, "torch_s": t,
            "ratio": a / t if t else None, "gflops": med("gflops"), "of_dgemm": med("of_dgemm"),
            "rounds": {"assay_s": [e["assay_s"] for e in ents], "torch_s": [e["torch_s"] for e in ents]}}

    heads = [f"{nt} thread{'s' if nt > 1 else ''}: assay / torch" for nt in threads]
    print()
    print("| oracle (shape) | torch reference | " + " | ".join(heads) + " |")
    print("|---|---|" + "---|" * len(threads))
    rows_json = []
    for base, row_name, key in ROWS:
        if base not in table:
            continue
        per = table[base]
        shape = next(iter(per.values()))["shape"]
        cells = []
        for nt in threads:
            e = per.get(nt)
            if e is None:
                cells.append("-")
            elif e["torch_s"] is None:
                cells.append(f"{fmt_s(e['assay_s'])} / -")
            else:
                cells.append(f"{fmt_s(e['assay_s'])} / {fmt_s(e['torch_s'])} = {e['ratio']:.2f}x")
        print(f"| {row_name} ({shape}) | {TORCH_NAMES.get(key, '-')} | " + " | ".join(cells) + " |")
        rows_json.append({"benchmark": base, "oracle": row_name, "shape": shape,
                          "torch_reference": TORCH_NAMES.get(key),
                          "threads": {str(nt): v for nt, v in per.items()}})
    print()
    print("assay / torch: wall time per call of the oracle form / of the torch reference at the same "
          "shape and thread count (< 1: the oracle is faster)"
          + (f"; medians of {args.repeat} rounds." if args.repeat > 1 else "."))
    if len(threads) > 1:
        lo, hi = min(threads), max(threads)
        parts = []
        for base, row_name, key in ROWS:
            per = table.get(base, {})
            if lo in per and hi in per and per[hi]["assay_s"]:
                parts.append(f"{row_name} {per[lo]['assay_s'] / per[hi]['assay_s']:.1f}x")
        if parts:
            print(f"assay scaling {lo} -> {hi} threads (wall time at {lo} / at {hi}): " + ", ".join(parts))
        cparts = []
        for base, (what, unit) in CEILINGS.items():
            if (base, lo) in ceil and (base, hi) in ceil:
                a, b = statistics.median(ceil[(base, lo)]), statistics.median(ceil[(base, hi)])
                cparts.append(f"{what} {a:.1f} -> {b:.1f} {unit} ({b / a:.1f}x)")
        if cparts:
            print(f"machine ceilings {lo} -> {hi} threads (no oracle; the most a compute- or memory-bound "
                  "form can scale): " + ", ".join(cparts))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ceilings": {f"{b} {nt}": v for (b, nt), v in ceil.items()}, "mode": mode, "threads": threads, "repeat": args.repeat, "nproc": nproc, "torch": torch.__version__,
                       "bench": args.bench, "bench_context": {str(k): v for k, v in contexts.items()},
                       "crosscheck": xres, "crosscheck_limit": CROSSCHECK_LIMIT, "rows": rows_json}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
