"""torch.optim under conformance, one upstream per implementation path.

  torch.optim[single]   foreach=False (_single_tensor_adam / _single_tensor_sgd / _single_tensor_adafactor)
  torch.optim[foreach]  foreach=True  (_multi_tensor_*: the CUDA default)
  torch.optim[fused]    fused=True    (torch._fused_adam(w)_ / torch._fused_sgd_)

Claims (from golden.case and the output names):
  - Adam / AdamW (`optimizer = "adam"`) whose `impl` names this path (torch_single / torch_foreach /
    torch_fused): Adam if `decoupled = false` else AdamW, amsgrad, maximize, bf16 storage; the
    fused path also takes `grad_scale` / `grad_inf`, passed the way GradScaler does it
    (optimizer.grad_scale / optimizer.found_inf before step(); found_inf = any non-finite grad).
    Outputs p, m, v (, vmax), or p_tol, m_tol, v_tol where the golden bounds them (fused Adam-L2).
  - SGD (`optimizer = "sgd"`, no `impl`: the golden's single / foreach / fused answers are the same
    bits, fixtures/optim.toml), claimed by all three paths. Outputs p (, buf with momentum).
  - Adafactor (`optimizer = "adafactor"`, no `impl`): single and foreach (torch has no fused one).
  Not claimed: apex / te Adam, Lion, LAMB, Muon, clipping, loss scaling, bf16 copies (not torch.optim).

Conventions mapped onto the goldens: the golden's state (m, v, vmax, buf) and `step0` are
preset as the optimizer's state (step as a float32 tensor: on the device for fused, on the CPU
otherwise, as torch creates it); g's rows are the gradients of successive step() calls; an
Adafactor golden with `factored = false` stores its vector as [1, K]: it is passed to torch as
1-D (a 2-D parameter would be factored) and reshaped back.
"""
import os

from conformance.upstream import Unavailable, Upstream

OP = "optim"
IMPLS = ("single", "foreach", "fused")


def _device():
    return os.environ.get("CONFORMANCE_DEVICE", "cuda")


def _supports(impl, case, golden):
    opt = case.get("optimizer")
    names = set(golden.outputs)
    if opt == "adam":
        if case.get("impl", "torch_foreach") != f"torch_{impl}":
            return False, f"impl {case.get('impl', 'torch_foreach')} is not torch_{impl}"
        if not case.get("bias_correction", True):
            return False, "torch Adam always bias-corrects"
        if impl != "fused" and ("grad_scale" in case or case.get("grad_inf", False)):
            return False, "grad_scale / found_inf: only the fused path takes them"
        base = {"p", "m", "v"} | ({"vmax"} if case.get("amsgrad", False) else set())
        if names not in (base, {n + "_tol" for n in base}):
            return False, f"outputs {sorted(names)}"
        return True, ""
    if opt == "sgd":
        want = {"p"} | ({"buf"} if case.get("momentum", 0.9) != 0 else set())
        return (names == want, "" if names == want else f"outputs {sorted(names)}")
    if opt == "adafactor":
        if impl == "fused":
            return False, "torch.optim.Adafactor has no fused path"
        return (names == {"p_tol"}, "" if names == {"p_tol"} else f"outputs {sorted(names)}")
    return False, f"optimizer {opt} is not run through torch.optim here"


def _make(impl):
    def make_fn():
        import torch
        dev = _device()
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise Unavailable("no CUDA device")
        path = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}

        def run_adam(c, x):
            prm = torch.nn.Parameter(x["p"].clone())
            cls = torch.optim.AdamW if c.get("decoupled", True) else torch.optim.Adam
            amsgrad = c.get("amsgrad", False)
            opt = cls([prm], lr=c.get("lr", 1e-3), betas=(c.get("beta1", 0.9), c.get("beta2", 0.999)),
                      eps=c.get("eps", 1e-8), weight_decay=c.get("weight_decay", 1e-2), amsgrad=amsgrad,
                      maximize=c.get("maximize", False), **path)
            step_dev = dev if impl == "fused" else "cpu"
            st = {"step": torch.tensor(float(c.get("step0", 9)), dtype=torch.float32, device=step_dev),
                  "exp_avg": x["m"].clone(), "exp_avg_sq": x["v"].clone()}
            if amsgrad:
                st["max_exp_avg_sq"] = x["vmax"].clone()
            opt.state[prm] = st
            for g in x["g"]:
                prm.grad = g.clone()
                if "grad_scale" in c or c.get("grad_inf", False):  # what GradScaler.step hands a fused optimizer
                    gs = c.get("grad_scale")
                    opt.grad_scale = None if gs is None else torch.tensor(float(gs), dtype=torch.float32, device=dev)
                    opt.found_inf = (~torch.isfinite(prm.grad)).any().float()  # GradScaler: any inf / NaN grad
                opt.step()
            outs = {"p": prm.detach(), "m": st["exp_avg"], "v": st["exp_avg_sq"]}
            if amsgrad:
                outs["vmax"] = st["max_exp_avg_sq"]
            return outs

        def run_sgd(c, x):
            prm = torch.nn.Parameter(x["p"].clone())
            mom = c.get("momentum", 0.9)
            opt = torch.optim.SGD([prm], lr=c.get("lr", 1e-2), momentum=mom, dampening=c.get("dampening", 0.0),
                                  weight_decay=c.get("weight_decay", 0.0), nesterov=c.get("nesterov", False),
                                  maximize=c.get("maximize", False), **path)
            if c.get("preset_buf", True) and mom != 0:
                opt.state[prm] = {"momentum_buffer": x["buf"].clone()}
            for g in x["g"]:
                prm.grad = g.clone()
                opt.step()
            outs = {"p": prm.detach()}
            if mom != 0:
                outs["buf"] = opt.state[prm]["momentum_buffer"]
            return outs

        def run_adafactor(c, x):
            shape = x["p"].shape
            flat = not c.get("factored", True)  # a vector stored as [1, K]: torch factors every >= 2-D param
            prm = torch.nn.Parameter(x["p"].clone().reshape(-1) if flat else x["p"].clone())
            eps1 = c.get("eps1")
            opt = torch.optim.Adafactor([prm], lr=c.get("lr", 1e-2), beta2_decay=c.get("beta2_decay", -0.8),
                                        eps=(eps1, c.get("eps2", 1e-3)), d=c.get("d", 1.0),
                                        weight_decay=c.get("weight_decay", 0.0), maximize=c.get("maximize", False),
                                        foreach=impl == "foreach")
            prm.grad = x["g"].clone().reshape(prm.shape)
            opt.step()
            return {"p_tol": prm.detach().reshape(shape)}

        def fn(golden):
            c = golden.case
            x = golden.to_torch(device=dev)
            run = {"adam": run_adam, "sgd": run_sgd, "adafactor": run_adafactor}[c["optimizer"]]
            outs = run(c, x)
            if not any(n in outs for n in golden.outputs):  # bounded variant: the *_tol names
                outs = {n + "_tol": t for n, t in outs.items()}
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            return {n: t.detach().clone() for n, t in outs.items()}
        return fn
    return make_fn


_WHY = {
    "single": "torch/optim/adam.py _single_tensor_adam: one fp32 (or bf16) kernel per in-place op, "
              "f32(1 - beta) weights, bias corrections from the double betas",
    "foreach": "torch/optim/adam.py _multi_tensor_adam: the same ops as _foreach_* kernels over the list, "
               "storage-dtype results after each",
    "fused": "torch/optim/adam.py _fused_adam: torch._fused_adam(w)_ computes in fp32 opmath and stores "
             "p, m, v once",
}

_ARG = {"single": "foreach=False", "foreach": "foreach=True", "fused": "fused=True"}

UPSTREAMS = [
    Upstream(f"torch.optim[{impl}]", "torch", OP, "strict", _WHY[impl],
             supports=(lambda impl: lambda case, golden: _supports(impl, case, golden))(impl),
             make_fn=_make(impl),
             what=f"torch.optim Adam/AdamW, SGD{'' if impl == 'fused' else ', Adafactor'} with {_ARG[impl]}, "
                  "the golden's state preset, one step() per row of g")
    for impl in IMPLS
]
