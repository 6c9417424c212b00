#!/usr/bin/env python3
"""gated_delta_chunked / gated_delta_recurrent vs fla's Triton kernels on the same shape and GPU.

Runs the bench_gated_delta binary (kernels/gated_delta/bench_gated_delta.cu), reads its JSON lines
(kernel, B, T, H, HV, K, V, chunk, ms), times fla's chunk_gated_delta_rule (against
gated_delta_chunked) and fused_recurrent_gated_delta_rule (against gated_delta_recurrent) with the
same options (bf16 q, k, v, beta; fp32 log-space g < 0; q/k l2-normalised in the kernel; GVA with
HV > H; scale K^-1/2; no initial state; final state returned; chunk 64), and prints the throughput
ratio ours / fla (= fla ms / our ms) per kernel, plus a JSON file. Timing: median of per-call CUDA
event times after warm-up (bench_util.h's time_ms). A benchmark, not a test.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402


def time_fla(torch, fn, r, iters):
    B, T, H, HV, K, V = (r[k] for k in ("B", "T", "H", "HV", "K", "V"))
    u = bench_common.uniform_maker(torch)
    q, k, v = u(B, T, H, K), u(B, T, H, K), u(B, T, HV, V)
    gate = u(B, T, HV, lo=-0.5, hi=-0.01, dtype=torch.float32)
    beta = u(B, T, HV, lo=0.05, hi=0.95)
    return bench_common.median_ms(torch, lambda: fn(q, k, v, gate, beta, scale=K ** -0.5, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True), iters)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default="bench_gated_delta.json")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    import torch
    import fla
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    upstream = {"gated_delta_chunked": ("chunk_gated_delta_rule", chunk_gated_delta_rule),
                "gated_delta_recurrent": ("fused_recurrent_gated_delta_rule",
                                          lambda q, k, v, g, beta, **kw: fused_recurrent_gated_delta_rule(
                                              q, k, v, g, beta=beta, **kw))}
    rows = bench_common.run_binary(a.bin, a.iters, "bench_gated_delta")
    print(f"fla {getattr(fla, '__version__', '?')}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'kernel':<24} {'shape':<30} {'ours ms':>9} {'fla':<34} {'fla ms':>9} {'ours/fla':>9}")
    for r in rows:
        name, fn = upstream[r["kernel"]]
        r["upstream"], r["upstream_ms"] = name, time_fla(torch, fn, r, a.iters)
        r["ratio"] = r["upstream_ms"] / r["ms"]
        shape = "B{B} T{T} H{H} HV{HV} K{K} V{V}".format(**r)
        print(f"{r['kernel']:<24} {shape:<30} {r['ms']:>9.3f} {name:<34} {r['upstream_ms']:>9.3f} {r['ratio']:>8.2f}x")
    bench_common.write_json(a.out, rows)


if __name__ == "__main__":
    main()
