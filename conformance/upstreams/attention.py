"""torch attention kernels under conformance: the SDPA backends and compiled flex_attention.

Each upstream is called the way a model calls it, on the golden's tensors, forward and (for a
`backward = true` golden) backward from the golden's dO. What each claims (decided from golden.case
and the golden's dtypes / output names):

  torch.sdpa[math]       F.scaled_dot_product_attention under sdpa_kernel(MATH) on inputs upcast to
                         float64 (the exact, reference-like run); O and the gradients rounded once to
                         the output dtype. Dense layouts, GQA, Dv != D, causal, windows, backward.
  torch.sdpa[flash]      sdpa_kernel(FLASH_ATTENTION) in the input dtype: dense, causal without a
                         window (flash takes no attn_mask), D == Dv <= 256, backward.
  torch.sdpa[efficient]  sdpa_kernel(EFFICIENT_ATTENTION): as math, in the input dtype.
  torch.sdpa[cudnn]      sdpa_kernel(CUDNN_ATTENTION): as math, in the input dtype.
  torch.flex_attention[compiled]
                         torch.compile(flex_attention) with a BlockMask for causal / window (and
                         the document mask of varlen goldens: the packed sequences are one batch
                         row), softcap as a score_mod, GQA via enable_gqa, LSE from
                         return_aux=AuxRequest(lse=True); backward through O (and LSE for lse_grad).
  None claims: learnable sinks (no SDPA / flex argument for a denominator-only logit), paged KV,
  fp8 inputs; SDPA claims no softcap, varlen or lse_grad (SDPA returns no LSE to differentiate).

Conventions mapped onto the goldens (docs/ops/attention.md), all pure layout / convention:
  - layout: goldens are [B, S, H, D] (varlen [T, H, D]); torch wants [B, H, S, D]: transposed in
    and out. LSE is [B, Hq, Sq] (varlen [Hq, T]).
  - GQA: query head h reads KV head h // (Hq / Hkv): torch's enable_gqa (repeat_interleave for the
    efficient backend, which refuses enable_gqa), never h % Hkv.
  - causal is bottom-right: Sq == Sk uses is_causal=True; otherwise
    torch.nn.attention.bias.causal_lower_right(Sq, Sk), torch's own bottom-right causal (it runs
    flash / efficient's native causal kernels, or a materialised mask on the other backends).
    Windows (inclusive [left, right], causal forcing right = 0) are an explicit boolean mask.
  - scale: passed only when the case sets one (torch's default is the golden's 1/sqrt(D)).
  - LSE: SDPA returns none, so the adapter computes logsumexp of the fp32 scores scale * q k^T
    (float64 for math) under the same mask; -inf on a row that sees no key. An SDPA LSE verdict
    therefore judges that computation, not the backend.
  - Rows that see no key: O is reported as the upstream returns it (NaN from some backends;
    the golden says 0), never patched.
"""
import math
import os

from conformance.upstream import Unavailable, Upstream

OP = "attention"
SDPA_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION"}


def _device():
    return os.environ.get("CONFORMANCE_DEVICE", "cuda")


def _window(case):
    """(left, right) of the golden's visibility rule: inclusive, -1 unbounded, causal forces right = 0."""
    left, right = (list(case.get("window", [-1, -1])) + [-1, -1])[:2]
    return int(left), 0 if case.get("causal", False) else int(right)


def _has_window(case):
    return list(case.get("window", [-1, -1])) != [-1, -1]


def _supports(case, golden, upstream):
    """Shared claim rules; upstream in SDPA_BACKENDS or "flex"."""
    sdpa = upstream != "flex"
    if case.get("sink", False):
        return False, "learnable sink: no denominator-only logit in SDPA / flex_attention"
    if int(case.get("page_size", 0)) > 0:
        return False, "paged KV"
    if (case.get("seqlens_q") or case.get("seqlens_k")) and sdpa:
        return False, "varlen: SDPA takes dense batches only"
    if float(case.get("softcap", 0.0)) != 0.0 and sdpa:
        return False, "softcap: SDPA has no score modification"
    if case.get("lse_grad", False) and sdpa:
        return False, "loss on the LSE: SDPA returns no LSE"
    if case["Hq"] % case["Hkv"] != 0:
        return False, "Hq % Hkv != 0"
    for name in ("q", "k", "v"):
        if golden.input_dtypes[name] not in ("bf16", "fp16"):
            return False, f"{name} is {golden.input_dtypes[name]}: only bf16 / fp16 inputs"
    want = {"O", "LSE"} | ({"dQ", "dK", "dV"} if case.get("backward") or case.get("lse_grad") else set())
    if set(golden.outputs) != want:
        return False, f"outputs {sorted(golden.outputs)}"
    if upstream == "flash":
        D, Dv = case["D"], case.get("Dv", case["D"])
        if D != Dv or D > 256:
            return False, f"flash needs D == Dv <= 256 (D = {D}, Dv = {Dv})"
        if _has_window(case):
            return False, "sliding window: flash takes no attn_mask"
    D, Dv = case["D"], case.get("Dv", case["D"])
    # Refusals torch states for these backends (sdp_utils.cpp, seen as "No available kernel" on an
    # H100 with torch 2.11): both need head dims that are multiples of 8; cuDNN takes no Sk = 1.
    if upstream in ("efficient", "cudnn") and (D % 8 or Dv % 8):
        return False, f"{upstream} needs head dims divisible by 8 (D = {D}, Dv = {Dv})"
    if upstream == "cudnn" and int(case["Sk"]) == 1:
        return False, "cudnn SDPA does not take a key/value length of 1"
    return True, ""


def _visible(case, Sq, Sk, device):
    """[Sq, Sk] bool of the golden's rule for a dense batch row, or None when every key is visible."""
    import torch
    left, right = _window(case)
    if left < 0 and right < 0:
        return None
    i = torch.arange(Sq, device=device)[:, None] + (Sk - Sq)  # the bottom-right diagonal of row i
    j = torch.arange(Sk, device=device)[None, :]
    m = torch.ones(Sq, Sk, dtype=torch.bool, device=device)
    if left >= 0:
        m &= j >= i - left
    if right >= 0:
        m &= j <= i + right
    return m


def _lse(q, k, scale, mask, enable_gqa):
    """logsumexp of scale * q k^T in q's dtype (fp32 for 16-bit inputs, no TF32) under mask: [B, Hq, Sq]."""
    import torch
    if enable_gqa and k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        s = torch.matmul(q.detach().to(dt), k.detach().to(dt).transpose(-1, -2)) * scale
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.logsumexp(s, dim=-1).float()  # an all -inf row gives -inf (the golden's convention)


def _make_sdpa(backend):
    def make_fn():
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right
        dev = _device()
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise Unavailable("no CUDA device")
        if dev.startswith("cuda") and backend == "flash" and not torch.backends.cuda.is_flash_attention_available():
            raise Unavailable("this torch build has no flash attention")
        kernel = getattr(SDPBackend, SDPA_BACKENDS[backend])

        def fn(golden):
            case = golden.case
            x = golden.to_torch(device=dev)
            bwd = bool(case.get("backward", False))
            work = torch.float64 if backend == "math" else x["q"].dtype
            q, k, v = (x[n].transpose(1, 2).to(work).requires_grad_(bwd) for n in ("q", "k", "v"))
            B, Hq, Sq, D = q.shape
            Hkv, Sk = k.shape[1], k.shape[2]
            kw = {"scale": float(case["scale"])} if case.get("scale") else {}
            scale = kw.get("scale", 1.0 / math.sqrt(D))
            mask = _visible(case, Sq, Sk, q.device)
            if mask is not None and _has_window(case):
                kw["attn_mask"] = mask
            elif mask is not None and Sq == Sk:  # causal: top-left == bottom-right on a square
                kw["is_causal"] = True
            elif mask is not None:  # causal, Sq != Sk: torch's own bottom-right causal
                kw["attn_mask"] = causal_lower_right(Sq, Sk)
            gqa = Hq != Hkv
            kq, vq = k, v
            if gqa and backend == "efficient":  # the efficient kernel refuses enable_gqa: expand heads h // group
                kq, vq = (t.repeat_interleave(Hq // Hkv, dim=1) for t in (k, v))
            elif gqa:
                kw["enable_gqa"] = True
            with sdpa_kernel(kernel):
                o = F.scaled_dot_product_attention(q, kq, vq, **kw)
                if bwd:
                    o.backward(x["dO"].transpose(1, 2).to(work))
            out_dt = {n: getattr(torch, {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[s.dtype])
                      for n, s in golden.outputs.items()}
            outs = {"O": o.detach().transpose(1, 2).to(out_dt["O"]).contiguous(),
                    "LSE": _lse(q, k, scale, mask, gqa).contiguous()}
            if bwd:
                for n, t in (("dQ", q), ("dK", k), ("dV", v)):
                    outs[n] = t.grad.transpose(1, 2).to(out_dt[n]).contiguous()
            return outs
        return fn
    return make_fn


def _make_flex():
    import torch
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention
    dev = _device()
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise Unavailable("no CUDA device")
    # one compiled kernel per golden shape: lift dynamo's recompile limit (8 by default), past which
    # torch.compile silently falls back to eager flex_attention, which is not the upstream under test
    cfg = torch._dynamo.config
    setattr(cfg, "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit", 1024)
    flex = torch.compile(flex_attention, dynamic=False)

    def fn(golden):
        case = golden.case
        x = golden.to_torch(device=dev)
        varlen = "cu_seqlens_q" in x
        bwd = bool(case.get("backward", False) or case.get("lse_grad", False))
        if varlen:  # packed [T, H, D] -> one batch row [1, H, T, D]; the document mask keeps sequences apart
            q, k, v, dO = (x[n].transpose(0, 1).unsqueeze(0) if n in x else None for n in ("q", "k", "v", "dO"))
        else:
            q, k, v, dO = (x[n].transpose(1, 2) if n in x else None for n in ("q", "k", "v", "dO"))
        q, k, v = (t.contiguous().requires_grad_(bwd) for t in (q, k, v))
        B, Hq, Sq, D = q.shape
        Hkv, Sk = k.shape[1], k.shape[2]
        i64 = dict(dtype=torch.int64, device=q.device)
        if varlen:  # per token: its sequence, and (queries) its bottom-right diagonal inside the sequence
            cq, ck = x["cu_seqlens_q"].long(), x["cu_seqlens_k"].long()
            nq, nk = cq.diff(), ck.diff()
            q_doc = torch.repeat_interleave(torch.arange(len(nq), **i64), nq)
            k_doc = torch.repeat_interleave(torch.arange(len(nk), **i64), nk)
            q_diag = torch.arange(Sq, **i64) - cq[q_doc] + nk[q_doc] - nq[q_doc]
            k_pos = torch.arange(Sk, **i64) - ck[k_doc]
        else:
            q_doc, k_doc = torch.zeros(Sq, **i64), torch.zeros(Sk, **i64)
            q_diag, k_pos = torch.arange(Sq, **i64) + (Sk - Sq), torch.arange(Sk, **i64)
        left, right = _window(case)

        def mask_mod(b, h, qi, kj):
            m = q_doc[qi] == k_doc[kj]
            if left >= 0:
                m = m & (k_pos[kj] >= q_diag[qi] - left)
            if right >= 0:
                m = m & (k_pos[kj] <= q_diag[qi] + right)
            return m
        masked = varlen or left >= 0 or right >= 0
        block_mask = create_block_mask(mask_mod, None, None, Sq, Sk, device=q.device) if masked else None
        cap = float(case.get("softcap", 0.0))
        score_mod = (lambda s, b, h, qi, kj: cap * torch.tanh(s / cap)) if cap else None
        kw = {"scale": float(case["scale"])} if case.get("scale") else {}
        o, aux = flex(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=Hq != Hkv,
                      return_aux=AuxRequest(lse=True), **kw)
        lse = aux.lse
        if bwd:
            pairs = [(o, dO if dO is not None else torch.zeros_like(o))]
            if "dLSE" in x:
                pairs.append((lse, x["dLSE"].reshape(lse.shape).to(lse.dtype)))
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])

        def back(t, name):  # [B, H, S, X] -> the golden's layout and output dtype
            t = t.detach()
            t = t[0].transpose(0, 1) if varlen else t.transpose(1, 2)
            dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[golden.outputs[name].dtype]
            return t.to(dt).contiguous()
        outs = {"O": back(o, "O"), "LSE": (lse.detach()[0] if varlen else lse.detach()).float().contiguous()}
        if bwd:
            outs.update(dQ=back(q.grad, "dQ"), dK=back(k.grad, "dK"), dV=back(v.grad, "dV"))
        return outs
    return fn


_STRICT_WHY = {
    "math": "math backend on float64 inputs (_scaled_dot_product_attention_math): every step in fp64, "
            "O and gradients rounded once to the output dtype",
    "flash": "FA2 (native/transformers/cuda/flash_attn): fp32 scores, softmax and accumulators; "
             "P converted to the input dtype (Element) before the PV gemm",
    "efficient": "CUTLASS mem-efficient kernel (mem_eff_attention/kernel_forward.h): fp32 accumulators, "
                 "P cast to scalar_t before the PV MMA",
    "cudnn": "cuDNN SDPA graph: fp32 intermediate/compute data type, P in the I/O dtype for the PV bmm",
}

UPSTREAMS = [
    Upstream(f"torch.sdpa[{b}]", "torch", OP, "strict", _STRICT_WHY[b],
             supports=(lambda b: lambda case, golden: _supports(case, golden, b))(b),
             make_fn=_make_sdpa(b),
             what=f"F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.{SDPA_BACKENDS[b]})"
                  + (" on float64 inputs" if b == "math" else "")
                  + "; [B,S,H,D] transposed to [B,H,S,D]; LSE from scores computed by the adapter")
    for b in SDPA_BACKENDS
] + [
    Upstream("torch.flex_attention[compiled]", "torch", OP, "strict",
             "flex_attention Triton template (torch/_inductor/kernel/flex): fp32 scores and row sums, "
             "p.to(MATMUL_PRECISION) (the input dtype) before tl.dot with V",
             supports=lambda case, golden: _supports(case, golden, "flex"),
             make_fn=_make_flex,
             what="torch.compile(flex_attention), BlockMask for causal / window / varlen documents, "
                  "softcap score_mod, enable_gqa, LSE from AuxRequest(lse=True)"),
]
