#!/usr/bin/env python3
"""Run torch.optim Adam / AdamW (single-tensor, foreach, fused) and SGD for one step from a preset
state on the GPU and write inputs and results as raw little-endian float32 files, plus a manifest
that optim_torch_compare (reference/optim/tools/optim_torch_compare.cpp) reads to recompute every
configuration with the fp32 emulation of reference/optim and count bit mismatches.

Usage (on a machine with torch + CUDA):
    python3 torch_optim_check.py OUTDIR [--n 1048576] [--seed 1]
    optim_torch_compare OUTDIR

Inputs: 2^20 fp32 elements of widely varying magnitude (|x| = 10^U(-8, 4), random sign), 1/16
of the gradients exactly zero; v is consistent with m (v = (k m)^2, k in [0.5, 3.5]).
"""
import argparse
import os
import sys

import torch


def logmag(gen, n, lo, hi):
    e = lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)
    s = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    return (s * torch.pow(10.0, e)).to(torch.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    n = a.n
    gen = torch.Generator().manual_seed(a.seed)
    g = logmag(gen, n, -8, 4)
    g[3::16] = 0.0
    p = logmag(gen, n, -8, 4)
    m = logmag(gen, n, -8, 4)
    k = 0.5 + 3.0 * torch.rand(n, generator=gen, dtype=torch.float64)
    v = ((m.double() * k) ** 2).to(torch.float32)
    vmax = (v.double() * (0.5 + torch.rand(n, generator=gen, dtype=torch.float64))).to(torch.float32)
    buf = logmag(gen, n, -8, 4)
    for name, t in (("g", g), ("p", p), ("m", m), ("v", v), ("vmax", vmax), ("buf", buf)):
        t.numpy().tofile(os.path.join(a.outdir, f"in_{name}.bin"))

    dev = torch.device("cuda")
    lines = []

    def path_kw(path):  # the implementation path torch.optim takes: single-tensor, foreach or fused
        return {"single": {"foreach": False}, "foreach": {"foreach": True}}.get(path, {"fused": True})

    def adam(tag, cls, path, step0, amsgrad=False, maximize=False, wd=1e-2, lr=1e-3,
             betas=(0.9, 0.999), eps=1e-8, bf16=False):
        dt = torch.bfloat16 if bf16 else torch.float32
        prm = torch.nn.Parameter(p.clone().to(dev, dt))
        kw = dict(lr=lr, betas=betas, eps=eps, weight_decay=wd, amsgrad=amsgrad, maximize=maximize)
        opt = cls([prm], **kw, **path_kw(path))
        st = {
            "step": torch.tensor(float(step0), dtype=torch.float32,
                                 device=dev if path == "fused" else "cpu"),
            "exp_avg": m.clone().to(dev, dt),
            "exp_avg_sq": v.clone().to(dev, dt),
        }
        if amsgrad:
            st["max_exp_avg_sq"] = vmax.clone().to(dev, dt)
        opt.state[prm] = st
        prm.grad = g.clone().to(dev, dt)
        opt.step()
        torch.cuda.synchronize()
        outs = {"p": prm.detach(), "m": st["exp_avg"], "v": st["exp_avg_sq"]}
        if amsgrad:
            outs["vmax"] = st["max_exp_avg_sq"]
        for k2, t in outs.items():
            t.float().cpu().numpy().tofile(os.path.join(a.outdir, f"{tag}_{k2}.bin"))
        decoupled = 1 if cls is torch.optim.AdamW else 0
        lines.append(f"adam {tag} {path} {decoupled} {int(amsgrad)} {int(maximize)} {step0} "
                     f"{lr!r} {betas[0]!r} {betas[1]!r} {eps!r} {wd!r} {int(bf16)}")

    for cls, cname in ((torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam")):
        for path in ("single", "foreach", "fused"):
            adam(f"{cname}_{path}", cls, path, 9)
            adam(f"{cname}_{path}_t1000", cls, path, 999)
            adam(f"{cname}_{path}_t1", cls, path, 0)
        for path in ("single", "foreach", "fused"):
            adam(f"{cname}_{path}_ams", cls, path, 9, amsgrad=True)
            adam(f"{cname}_{path}_max", cls, path, 9, maximize=True)
    adam("adam_single_wd0", torch.optim.Adam, "single", 9, wd=0.0)
    for path in ("single", "foreach", "fused"):
        adam(f"adamw_{path}_bf16", torch.optim.AdamW, path, 9, bf16=True)

    def sgd(tag, path, momentum, dampening, nesterov, wd, preset_buf, lr=1e-2):
        prm = torch.nn.Parameter(p.clone().to(dev))
        kw = dict(lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                  weight_decay=wd)
        opt = torch.optim.SGD([prm], **kw, **path_kw(path))
        if preset_buf:
            opt.state[prm] = {"momentum_buffer": buf.clone().to(dev)}
        prm.grad = g.clone().to(dev)
        opt.step()
        torch.cuda.synchronize()
        prm.detach().float().cpu().numpy().tofile(os.path.join(a.outdir, f"{tag}_p.bin"))
        b = opt.state[prm].get("momentum_buffer")
        if b is not None:
            b.float().cpu().numpy().tofile(os.path.join(a.outdir, f"{tag}_buf.bin"))
        lines.append(f"sgd {tag} {path} {momentum!r} {dampening!r} {int(nesterov)} {wd!r} "
                     f"{int(preset_buf)} {lr!r}")

    for path in ("single", "foreach", "fused"):
        sgd(f"sgd_{path}_mom", path, 0.9, 0.1, False, 1e-2, True)
        sgd(f"sgd_{path}_nest", path, 0.9, 0.0, True, 1e-2, True)
        sgd(f"sgd_{path}_first", path, 0.9, 0.1, False, 1e-2, False)
        sgd(f"sgd_{path}_plain", path, 0.0, 0.0, False, 0.0, False)

    with open(os.path.join(a.outdir, "manifest.txt"), "w") as f:
        f.write(f"n {n}\n")
        f.write(f"torch {torch.__version__} {torch.cuda.get_device_name()}\n")
        for ln in lines:
            f.write(ln + "\n")
    print(f"wrote {len(lines)} configurations to {a.outdir}", file=sys.stderr)


if __name__ == "__main__":
    main()
