#!/usr/bin/env python3
"""Our attention kernels vs PyTorch SDPA (flash backend) on the same shapes and GPU, in one run.

Runs the bench_attention binary (kernels/attention/bench_attention.cu), reads its JSON lines
(kernel, shape, B, Hq, Hkv, Sq, Sk, D, causal, ms, tflops), times
torch.nn.functional.scaled_dot_product_attention under
torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) on every shape it reports (bf16,
uniform [-1, 1) inputs, the same FLOP count), and prints a table with the throughput ratio
ours / SDPA (= SDPA ms / our ms) per (kernel, shape), plus a JSON file.

GQA (Hkv < Hq): SDPA is called with enable_gqa=True; if the flash backend refuses it, K and V are
expanded to Hq heads (repeat_interleave, contiguous, outside the timed region) and the row says
"expanded". Causal: PyTorch's is_causal is top-left aligned; the causal shapes here have Sq == Sk,
where top-left and bottom-right coincide; decode shapes are non-causal (Sq = 1 sees every key).
Timing: median of per-call CUDA event times after warm-up, as bench_util.h's time_ms does.
A benchmark, not a test.
"""
import argparse
import json
import statistics
import subprocess
import sys


def flops(r):
    f = 4.0 * r["B"] * r["Hq"] * r["Sq"] * r["Sk"] * r["D"]
    if r["causal"] and r["Sq"] == r["Sk"]:
        f *= 0.5
    return f


def time_sdpa(torch, r, iters):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, Hq, Hkv, Sq, Sk, D = r["B"], r["Hq"], r["Hkv"], r["Sq"], r["Sk"], r["D"]
    dev = "cuda"
    q = torch.rand(B, Hq, Sq, D, device=dev, dtype=torch.bfloat16) * 2 - 1
    k = torch.rand(B, Hkv, Sk, D, device=dev, dtype=torch.bfloat16) * 2 - 1
    v = torch.rand(B, Hkv, Sk, D, device=dev, dtype=torch.bfloat16) * 2 - 1
    causal = bool(r["causal"])
    mode = "mha" if Hkv == Hq else "enable_gqa"

    def call(kk, vv, gqa):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            if gqa:
                return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, enable_gqa=True)
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)

    kk, vv = k, v
    gqa = Hkv != Hq
    if gqa:
        try:
            call(kk, vv, True)
            torch.cuda.synchronize()
        except RuntimeError as e:  # the flash backend may refuse enable_gqa
            mode = "expanded (flash refused enable_gqa: %s)" % str(e).splitlines()[0][:80]
            kk = k.repeat_interleave(Hq // Hkv, dim=1).contiguous()
            vv = v.repeat_interleave(Hq // Hkv, dim=1).contiguous()
            gqa = False
    for _ in range(3):
        call(kk, vv, gqa)
    torch.cuda.synchronize()
    times = []
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        a.record()
        call(kk, vv, gqa)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del q, k, v, kk, vv
    torch.cuda.empty_cache()
    return statistics.median(times), mode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="bench_attention binary")
    ap.add_argument("--out", default="bench_attention.json")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()

    proc = subprocess.run([a.bin, "--iters", str(a.iters)], stdout=subprocess.PIPE, text=True)
    ours = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            print(line, flush=True)
            rec = json.loads(line)
            # Timings only: attention_fwd_sm90's "attention_check" lines (its difference from v2)
            # and failed launches ("error") are printed, not compared.
            if rec.get("bench") == "attention" and "ms" in rec:
                ours.append(rec)
    if proc.returncode != 0:
        print("bench_attention exited with %d" % proc.returncode, file=sys.stderr)

    import torch

    device = torch.cuda.get_device_name()
    sdpa = {}
    for r in ours:
        if r["shape"] in sdpa:
            continue
        try:
            ms, mode = time_sdpa(torch, r, a.iters)
            sdpa[r["shape"]] = {"ms": ms, "tflops": flops(r) / (ms * 1e9), "mode": mode}
        except Exception as e:  # report, keep going
            sdpa[r["shape"]] = {"ms": None, "tflops": None, "mode": "error: %s" % str(e).splitlines()[0][:120]}
        s = sdpa[r["shape"]]
        print(json.dumps({"bench": "attention", "kernel": "torch_sdpa_flash", "shape": r["shape"], "ms": s["ms"],
                          "tflops": s["tflops"], "gqa": s["mode"], "device": device}), flush=True)

    rows = []
    for r in ours:
        s = sdpa[r["shape"]]
        ratio = s["ms"] / r["ms"] if s["ms"] else None
        rows.append({"shape": r["shape"], "kernel": r["kernel"], "ours_ms": r["ms"], "ours_tflops": r["tflops"],
                     "sdpa_ms": s["ms"], "sdpa_tflops": s["tflops"], "ratio_ours_over_sdpa": ratio,
                     "sdpa_gqa": s["mode"]})

    hdr = "%-36s %-22s %10s %9s %10s %9s %7s  %s" % ("shape", "kernel", "ours ms", "TFLOP/s", "sdpa ms", "TFLOP/s",
                                                     "ratio", "sdpa gqa")
    print("\n" + hdr + "\n" + "-" * len(hdr))
    for x in rows:
        f = lambda v, fmt: (fmt % v) if v is not None else "-"
        print("%-36s %-22s %10s %9s %10s %9s %7s  %s" % (x["shape"], x["kernel"], f(x["ours_ms"], "%.4f"),
                                                         f(x["ours_tflops"], "%.1f"), f(x["sdpa_ms"], "%.4f"),
                                                         f(x["sdpa_tflops"], "%.1f"),
                                                         f(x["ratio_ours_over_sdpa"], "%.3f"), x["sdpa_gqa"]))
    with open(a.out, "w") as fh:
        json.dump({"device": device, "torch": torch.__version__, "iters": a.iters, "rows": rows}, fh, indent=1)
    print("\nwrote %s" % a.out)
    return 0 if proc.returncode == 0 and ours else 1


if __name__ == "__main__":
    sys.exit(main())
