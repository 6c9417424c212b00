"""Upstream gated delta rule kernels (op gated_delta) under conformance.

fla (`fla-core`, read at 0.6.0):
- `fla.chunk_gated_delta_rule`: the Triton chunk kernels (WY/UT form), forward and its autograd
  backward (`chunk_gated_delta_rule_bwd`). Profile `bf16-states`: in a bf16 run it stores the chunk
  states h, w, u, v_new and the WY inverse in k's dtype. fp32 runs use TF32 dots (see _FLA_CHUNK_WHY).
- `fla.fused_recurrent_gated_delta_rule`: token by token with the state in fp32 registers: `strict`.
  Forward only: 0.6.0's `FusedRecurrentFunction.backward` raises NotImplementedError.
Every golden option maps onto an fla argument: GVA (HV > H, native), `gate = "log"` (g),
`"none"` (chunk: g = 0; fused_recurrent: g=None), `"in_kernel"` (use_gate_in_kernel with A_log,
dt_bias: fla 0.6.0 computes -exp(A_log) softplus(g + dt_bias) itself, softplus threshold 20),
`beta_mode` (use_beta_sigmoid_in_kernel, allow_neg_eigval), `qk_l2norm`
(use_qk_l2norm_in_kernel), `state_layout = "vk"` (state_v_first, native), varlen (cu_seqlens, empty
sequences included: judging them is the point), decode mode (the same recurrence over T steps).
The chunk kernel runs at the case's chunk_size when fla takes it (16, 32, 64), else at its 64.
fla's dispatcher would route chunk_gated_delta_rule to FlashQLA (a separate TileLang package) where
that is installed; `env` pins the Triton path these profiles were read from (FLA_FLASH_QLA=0).
fla 0.6.0 refuses its gated chunk backward on Hopper with Triton >= 3.4.0, < 3.7.1 (fla #640) unless
TileLang is installed, as its message advises: then its TileLang backend computes the gated
chunk_bwd_dqkwg (fla/ops/common/backends/tilelang; the only fla op it takes over here, so the
forward is the Triton path either way). scripts/conformance --fetch-tilelang brings TileLang; without
it the refusal is raised as Unavailable (not run), never as a failure.

transformers (Qwen3-Next's pure torch fallbacks, `transformers.models.qwen3_next.modeling_qwen3_next`):
- `transformers.qwen3_next.torch_chunk_gated_delta_rule` (chunked, torch.linalg.solve_triangular) and
  `transformers.qwen3_next.torch_recurrent_gated_delta_rule` (token loop). transformers >= 5 wraps them
  in a dispatcher that calls fla when fla is importable: the adapter unwraps to the torch function.
  They take a log-space g and a post-activation beta only, as the model calls them: the in-kernel gate
  is computed here as Qwen3NextGatedDeltaNet.forward does (-A_log.float().exp() * softplus(a.float() +
  dt_bias)) and the sigmoid betas in fp32 (the model's b.sigmoid() runs in the activation dtype: a
  rounding of the model, not of these functions); GVA by repeat_interleave before the call, as the model
  does where the function does not (5.17's does not, 5.24's does: a no-op then); `vk` by transposing
  the states. No
  scale argument (always K^-1/2) and no cu_seqlens: such cases are refused. Backward through torch
  autograd. Both cast everything to fp32: `strict`.
"""
import inspect

from conformance.upstream import Unavailable, Upstream

OP = "gated_delta"
# gradient output -> the input it is the gradient of
GRADS = {"dq": "q", "dk": "k", "dv": "v", "dg": "g", "db": "beta", "dh0": "initial_state",
         "dA_log": "A_log", "ddt_bias": "dt_bias"}
FLOATS = ("bf16", "fp16", "fp32")


def _backward(golden):
    return any(n in golden.outputs for n in GRADS)


def _common(case, golden):
    """The checks every adapter here shares: options it knows, dtypes torch takes."""
    for field, known in (("mode", ("prefill", "decode")), ("gate", ("log", "none", "in_kernel")),
                         ("beta_mode", ("given", "sigmoid", "two_sigmoid")), ("state_layout", ("kv", "vk"))):
        default = {"mode": "prefill", "gate": "log", "beta_mode": "given", "state_layout": "kv"}[field]
        if case.get(field, default) not in known:
            return False, f"{field} {case.get(field)!r}"
    if case["HV"] % case.get("H", 1):
        return False, "HV % H != 0"
    for name in ("q", "k", "v", "beta"):
        if golden.input_dtypes.get(name) not in FLOATS:
            return False, f"{name} dtype {golden.input_dtypes.get(name)}"
    if set(golden.outputs) - {"o", "final_state"} - set(GRADS):
        return False, f"outputs {sorted(golden.outputs)}"
    return True, ""


def _leaves(golden, device):
    """The golden's inputs on device; the differentiable ones as autograd leaves in a backward case."""
    import torch
    x = golden.to_torch(device=device)
    bwd = _backward(golden)
    for name in set(GRADS.values()) & set(x):
        x[name] = x[name].clone().requires_grad_(bwd)
    return x


def _grads(golden, x, o, ht, res):
    """L = <do, o> + <dht, final_state>: the golden's gradients are what autograd returns."""
    import torch
    dht = x["dht"].to(ht.dtype) if "dht" in x else torch.zeros_like(ht)
    torch.autograd.backward([o, ht], [x["do"].to(o.dtype), dht])
    for grad, name in GRADS.items():
        if grad in golden.outputs:
            res[grad] = x[name].grad
    return res


# ---- fla ----

_FLA_CHUNK_WHY = (
    "fla/ops/common/chunk_delta_h.py: h = k.new_empty(..) and v_new stored in k.dtype, w/u and "
    "the WY inverse A likewise (gated_delta_rule/chunk_fwd.py), only the carried state and "
    "final_state fp32; fp32 runs: SOLVE_TRIL_DOT_PRECISION = 'tf32' on sm >= 80 (the WY solve, "
    "pinned even under TRITON_F32_DEFAULT=ieee), every other tl.dot at Triton's default (TF32) "
    "except wy_fast's u = A (beta v) (allow_tf32=False)")
_FLA_RECURRENT_WHY = (
    "fla/ops/gated_delta_rule/fused_recurrent.py: b_h = tl.zeros([BK, BV], tl.float32), every "
    "input loaded .to(tl.float32), no tl.dot (fp32 elementwise and sums), only o stored in v.dtype")


def _fla_supports(chunk):
    def supports(case, golden):
        ok, why = _common(case, golden)
        if not ok:
            return ok, why
        if chunk and case["K"] > 256:
            return False, "K > 256 (chunk_gated_delta_rule_fwd_h asserts K <= 256)"
        if not chunk and _backward(golden):
            return False, "backward: fla 0.6.0's FusedRecurrentFunction.backward raises NotImplementedError"
        return True, ""
    return supports


def _fla_make_fn(chunk):
    def make_fn():
        try:
            import torch
        except ImportError as e:
            raise Unavailable(f"torch: {e}") from None
        if not torch.cuda.is_available():
            raise Unavailable("no CUDA device: fla's Triton kernels need a GPU")
        try:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
        except Exception as e:  # noqa: BLE001 (any import failure means: not runnable here)
            raise Unavailable(f"fla not importable: {type(e).__name__}: {e}") from None
        supports = _fla_supports(chunk)

        def fn(golden):
            c = golden.case
            x = _leaves(golden, "cuda")
            gate, beta_mode = c.get("gate", "log"), c.get("beta_mode", "given")
            kw = dict(scale=float(c["scale"]) if "scale" in c else None,
                      initial_state=x.get("initial_state"), output_final_state=True,
                      use_qk_l2norm_in_kernel=bool(c.get("qk_l2norm", False)),
                      use_beta_sigmoid_in_kernel=beta_mode != "given",
                      allow_neg_eigval=beta_mode == "two_sigmoid",
                      state_v_first=c.get("state_layout", "kv") == "vk",
                      cu_seqlens=x["cu_seqlens"].long() if "cu_seqlens" in x else None)
            g = x.get("g")
            if gate == "in_kernel":  # g is the raw pre-activation `a`; fla applies A_log, dt_bias itself
                kw.update(use_gate_in_kernel=True, A_log=x["A_log"], dt_bias=x.get("dt_bias"))
            elif gate == "none" and chunk:  # the chunk path needs a g: 0 is the plain delta rule
                g = torch.zeros(x["beta"].shape, dtype=torch.float32, device="cuda")
            bwd = _backward(golden)
            with torch.set_grad_enabled(bwd):
                if chunk:
                    cs = int(c.get("chunk_size", 64))
                    o, ht = chunk_gated_delta_rule(x["q"], x["k"], x["v"], g, x["beta"],
                                                   chunk_size=cs if cs in (16, 32, 64) else 64, **kw)
                else:
                    o, ht = fused_recurrent_gated_delta_rule(x["q"], x["k"], x["v"], g, beta=x["beta"], **kw)
                res = {"o": o.detach(), "final_state": ht.detach()}
                if not bwd:
                    return res
                try:
                    return _grads(golden, x, o, ht, res)
                except RuntimeError as e:
                    if "#640" in str(e):  # fla refuses this Triton on Hopper: not run, not failed
                        raise Unavailable(f"fla refuses its gated backward here: {e}") from None
                    raise
        return fn
    return make_fn


# ---- transformers (Qwen3-Next torch forms) ----

def _hf_supports(case, golden):
    ok, why = _common(case, golden)
    if not ok:
        return ok, why
    if case.get("cu_seqlens"):
        return False, "varlen: the torch forms take no cu_seqlens (transformers raises for packed sequences without fla)"
    if "scale" in case and abs(float(case["scale"]) - case["K"] ** -0.5) > 1e-12 * case["K"] ** -0.5:
        return False, f"scale {case['scale']}: the torch forms always scale by K^-1/2"
    return True, ""


def _hf_make_fn(func_name, chunked):
    def make_fn():
        try:
            import torch
            import torch.nn.functional as F
            from transformers.models.qwen3_next import modeling_qwen3_next as m
        except Exception as e:  # noqa: BLE001
            raise Unavailable(f"transformers' qwen3_next not importable: {type(e).__name__}: {e}") from None
        form = getattr(m, func_name, None)
        if form is None:
            raise Unavailable(f"transformers {getattr(m, '__version__', '')} has no {func_name}")
        form = inspect.unwrap(form)  # >= 5: past the hub-kernel / fla dispatcher to the torch function
        if form.__module__ != m.__name__ or form.__name__ != func_name:
            raise Unavailable(f"{func_name} unwraps to {form.__module__}.{form.__name__}, not the torch form")
        device = "cuda" if torch.cuda.is_available() else "cpu"

        def fn(golden):
            c = golden.case
            x = _leaves(golden, device)
            gate, beta_mode = c.get("gate", "log"), c.get("beta_mode", "given")
            vk = c.get("state_layout", "kv") == "vk"
            bwd = _backward(golden)
            with torch.set_grad_enabled(bwd):
                if gate == "log":
                    g = x["g"]
                elif gate == "none":
                    g = torch.zeros(x["beta"].shape, dtype=torch.float32, device=device)
                else:  # Qwen3NextGatedDeltaNet.forward's own line (the golden's definition)
                    dt_bias = x["dt_bias"] if "dt_bias" in x else 0.0
                    g = -x["A_log"].float().exp() * F.softplus(x["g"].float() + dt_bias)
                beta = x["beta"]
                if beta_mode != "given":
                    beta = beta.float().sigmoid() * (2.0 if beta_mode == "two_sigmoid" else 1.0)
                q, k, rep = x["q"], x["k"], c["HV"] // c.get("H", 1)
                if rep > 1:
                    q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
                h0 = x.get("initial_state")
                if h0 is not None and vk:
                    h0 = h0.transpose(-1, -2)
                kw = dict(initial_state=h0, output_final_state=True,
                          use_qk_l2norm_in_kernel=bool(c.get("qk_l2norm", False)))
                if chunked:
                    kw["chunk_size"] = int(c.get("chunk_size", 64))
                o, ht = form(q, k, x["v"], g, beta, **kw)
                if vk:
                    ht = ht.transpose(-1, -2)
                res = {"o": o.detach(), "final_state": ht.detach().contiguous()}
                return _grads(golden, x, o, ht, res) if bwd else res
        return fn
    return make_fn


_HF_WHY = ("modeling_qwen3_next.py (5.17, 5.24): q, k, v, beta, g and the initial state .to(torch.float32) "
           "before any arithmetic (the l2norm too), torch fp32 matmuls / solve_triangular at torch's "
           "default precision (no TF32), only o cast back to the input dtype")

UPSTREAMS = [
    Upstream("fla.chunk_gated_delta_rule", "fla-core", OP, "bf16-states", _FLA_CHUNK_WHY,
             _fla_supports(True), _fla_make_fn(True),
             what="fla's Triton chunk GDN (WY/UT), forward and autograd backward; golden options map onto "
                  "fla's arguments one to one, chunk_size as the case's when fla takes it",
             env={"FLA_FLASH_QLA": "0"}),
    Upstream("fla.fused_recurrent_gated_delta_rule", "fla-core", OP, "strict", _FLA_RECURRENT_WHY,
             _fla_supports(False), _fla_make_fn(False),
             what="fla's Triton fused recurrent GDN (fp32 state in registers), forward only (no backward in fla)"),
    Upstream("transformers.qwen3_next.torch_chunk_gated_delta_rule", "transformers", OP, "strict", _HF_WHY,
             _hf_supports, _hf_make_fn("torch_chunk_gated_delta_rule", True),
             what="Qwen3-Next's pure torch chunked GDN (unwrapped from transformers' fla dispatcher), forward "
                  "and torch autograd; in-kernel gate and sigmoid betas computed as the model does, in fp32"),
    Upstream("transformers.qwen3_next.torch_recurrent_gated_delta_rule", "transformers", OP, "strict", _HF_WHY,
             _hf_supports, _hf_make_fn("torch_recurrent_gated_delta_rule", False),
             what="Qwen3-Next's pure torch token-loop GDN (unwrapped from transformers' fla dispatcher), forward "
                  "and torch autograd; in-kernel gate and sigmoid betas computed as the model does, in fp32"),
]
