#!/usr/bin/env python3
"""Run torch.optim on the inputs of optim goldens and write candidate HDF5 files for `assay compare`.

For every golden of op `optim` whose case is an Adam/AdamW (impl torch_single / torch_foreach /
torch_fused) or SGD case, this reads the golden's /inputs (exact storage codes), runs one (or
`steps`) optimizer step(s) on the GPU from that preset state with the case's hyper-parameters,
and writes OUTDIR/<case>.h5 with /outputs/<name> under the golden's output names. Then:

    assay compare GOLDEN OUTDIR/<case>.h5        # bit-exact for the exact outputs (p, m, v, ...)

Usage (a machine with torch + CUDA + h5py):
    python3 scripts/torch_optim_candidates.py GOLDEN_DIR_OR_FILES... --out OUTDIR
    # the 2^20-element acceptance case is L1: `assay gen --op optim --level L1` first, then
    # point this script at <build>/golden-L1/optim/adamw_single_large.h5.
Cases it cannot run (apex / te, lion, lamb, ...) are listed as skipped.
The defaults below mirror the bindings in fixtures/optim/<optimizer>.cpp (keep them in sync).
"""
import argparse
import glob
import os
import sys
import tomllib

import h5py
import numpy as np
import torch


def load_input(f, name):
    ds = f["inputs"][name]
    dt = ds.attrs["dtype"]
    dt = dt.decode() if isinstance(dt, bytes) else str(dt)
    a = ds[()]
    if dt == "fp32":
        return torch.from_numpy(a.astype(np.uint32).view(np.float32).copy())
    if dt == "bf16":
        return torch.from_numpy(a.astype(np.uint16).view(np.int16).copy()).view(torch.bfloat16)
    if dt in ("i32", "int32"):
        return torch.from_numpy(a.astype(np.int32))
    raise ValueError(f"unsupported input dtype {dt}")


def case_of(f):
    text = f.attrs["case_toml"]
    text = text.decode() if isinstance(text, bytes) else str(text)
    return tomllib.loads(text)["case"][0]


def run_adam(c, f, dev):
    impl = c.get("impl", "torch_foreach")
    if impl not in ("torch_single", "torch_foreach", "torch_fused"):
        return None, f"impl {impl} is not a torch.optim path"
    lr = c.get("lr", 1e-3)
    b1, b2 = c.get("beta1", 0.9), c.get("beta2", 0.999)
    eps, wd = c.get("eps", 1e-8), c.get("weight_decay", 1e-2)
    decoupled = c.get("decoupled", True)
    amsgrad, maximize = c.get("amsgrad", False), c.get("maximize", False)
    step0 = c.get("step0", 9)
    G = load_input(f, "g").to(dev)
    S, N = G.shape
    p = load_input(f, "p").to(dev)
    m = load_input(f, "m").to(dev)
    v = load_input(f, "v").to(dev)
    vmax = load_input(f, "vmax").to(dev) if amsgrad else None
    fused = impl == "torch_fused"
    if "grad_scale" in c or c.get("grad_inf", False):
        # Call the fused kernel directly, as GradScaler does: the step is incremented first and
        # restored when found_inf is set (torch/optim/adam.py _fused_adam).
        kern = torch._fused_adamw_ if decoupled else torch._fused_adam_
        step = torch.tensor(float(step0), dtype=torch.float32, device=dev)
        gs = torch.tensor(float(c["grad_scale"]), dtype=torch.float32, device=dev) if "grad_scale" in c else None
        for k in range(S):
            g = G[k].clone()
            fi = None
            if c.get("grad_inf", False):
                fi = (~torch.isfinite(g)).any().float().reshape(())
            step += 1
            kern([p], [g], [m], [v], [vmax] if amsgrad else [], [step], lr=lr, beta1=b1, beta2=b2,
                 weight_decay=wd, eps=eps, amsgrad=amsgrad, maximize=maximize,
                 grad_scale=gs, found_inf=fi)
            if fi is not None:
                step -= fi
        torch.cuda.synchronize()
    else:
        prm = torch.nn.Parameter(p.clone())
        cls = torch.optim.AdamW if decoupled else torch.optim.Adam
        kw = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, amsgrad=amsgrad, maximize=maximize)
        if fused:
            kw["fused"] = True
        else:
            kw["foreach"] = impl == "torch_foreach"
        opt = cls([prm], **kw)
        st = {"step": torch.tensor(float(step0), dtype=torch.float32, device=dev if fused else "cpu"),
              "exp_avg": m, "exp_avg_sq": v}
        if amsgrad:
            st["max_exp_avg_sq"] = vmax
        opt.state[prm] = st
        for k in range(S):
            prm.grad = G[k].clone()
            opt.step()
        torch.cuda.synchronize()
        p = prm.detach()
    outs = {"p": p, "m": m, "v": v}
    if amsgrad:
        outs["vmax"] = vmax
    names = set(f["expected"].keys())
    if "p" not in names:  # bounded variant (fused Adam with L2 decay): *_tol names
        outs = {k + "_tol": t for k, t in outs.items()}
    return outs, None


def run_sgd(c, f, dev):
    lr = c.get("lr", 1e-2)
    mom, damp = c.get("momentum", 0.9), c.get("dampening", 0.0)
    wd, nest, maxi = c.get("weight_decay", 0.0), c.get("nesterov", False), c.get("maximize", False)
    preset = c.get("preset_buf", True)
    G = load_input(f, "g").to(dev)
    prm = torch.nn.Parameter(load_input(f, "p").to(dev))
    opt = torch.optim.SGD([prm], lr=lr, momentum=mom, dampening=damp, weight_decay=wd, nesterov=nest,
                          maximize=maxi, foreach=False)
    if preset:
        opt.state[prm] = {"momentum_buffer": load_input(f, "buf").to(dev)}
    for k in range(G.shape[0]):
        prm.grad = G[k].clone()
        opt.step()
    torch.cuda.synchronize()
    outs = {"p": prm.detach()}
    if mom != 0:
        outs["buf"] = opt.state[prm]["momentum_buffer"]
    return outs, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("goldens", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    files = []
    for g in a.goldens:
        files += sorted(glob.glob(os.path.join(g, "*.h5"))) if os.path.isdir(g) else [g]
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", file=sys.stderr)
    for path in files:
        with h5py.File(path, "r") as f:
            op = f.attrs["op"]
            op = op.decode() if isinstance(op, bytes) else str(op)
            if op != "optim":
                continue
            c = case_of(f)
            kind = c.get("optimizer")
            if kind == "adam":
                outs, why = run_adam(c, f, dev)
            elif kind == "sgd":
                outs, why = run_sgd(c, f, dev)
            else:
                outs, why = None, f"optimizer {kind} has no torch.optim counterpart here"
            if outs is None:
                print(f"skip {c['name']}: {why}", file=sys.stderr)
                continue
            dst = os.path.join(a.out, os.path.basename(path))
            with h5py.File(dst, "w") as o:
                grp = o.create_group("outputs")
                for k, t in outs.items():
                    grp.create_dataset(k, data=t.detach().float().cpu().numpy())
            print(f"wrote {dst}", file=sys.stderr)


if __name__ == "__main__":
    main()
