#!/usr/bin/env python3
"""mamba3_siso_chunked vs mamba_ssm's Triton `mamba3_siso_combined` on the same shape and GPU.

Runs the bench_mamba3 binary (kernels/mamba3/bench_mamba3.cu), reads its JSON lines (B, T, H, P,
N, S, Q, ms), times mamba3_siso_combined on every shape it reports with the same tensors'
shapes, dtypes and ranges (bf16 Q, K [B, T, 1, N], V, Z [B, T, H, P], Trap [B, H, T], Angles
[B, T, H, N/2]; fp32 ADT in [-0.5, -0.001), DT in [0.005, 0.5), Q_bias, K_bias [H, N], D [H]; no
input states; final states returned; the binary's chunk size), and prints the throughput ratio
ours / upstream (= upstream ms / our ms), plus a JSON file. mamba_ssm's Triton sources are loaded
as the conformance runner loads them (conformance/upstreams/ssd.py). Timing: median of per-call
CUDA event times after warm-up (bench_util.h's time_ms). A benchmark, not a test.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402


def time_upstream(torch, fn, r, iters):
    B, T, H, P, N, S, Q = (r[k] for k in ("B", "T", "H", "P", "N", "S", "Q"))
    u, f32 = bench_common.uniform_maker(torch), torch.float32
    args = [u(B, T, 1, N), u(B, T, 1, N), u(B, T, H, P),
            u(B, H, T, lo=-0.5, hi=-0.001, dtype=f32), u(B, H, T, lo=0.005, hi=0.5, dtype=f32), u(B, H, T),
            u(H, N, lo=0.5, hi=1.5, dtype=f32), u(H, N, lo=0.5, hi=1.5, dtype=f32), u(B, T, H, S),
            u(H, dtype=f32), u(B, T, H, P)]
    return bench_common.median_ms(torch, lambda: fn(*args, Input_States=None, chunk_size=Q, return_final_states=True,
                                                    cu_seqlens=None), iters)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default="bench_mamba3.json")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    import torch
    from conformance.upstreams import ssd as up

    fn = up.load("ops.triton.mamba3.mamba3_siso_combined").mamba3_siso_combined
    rows = bench_common.run_binary(a.bin, a.iters, "bench_mamba3")
    print(f"mamba_ssm {up.version()}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'kernel':<22} {'shape':<28} {'ours ms':>9} {'upstream ms':>12} {'ours/upstream':>14}")
    for r in rows:
        r["upstream"] = "mamba3_siso_combined"
        r["upstream_ms"] = time_upstream(torch, fn, r, a.iters)
        r["ratio"] = r["upstream_ms"] / r["ms"]
        shape = "B{B} T{T} H{H} P{P} N{N} Q{Q}".format(**r)
        print(f"{r['kernel']:<22} {shape:<28} {r['ms']:>9.3f} {r['upstream_ms']:>12.3f} {r['ratio']:>13.2f}x")
    bench_common.write_json(a.out, rows)


if __name__ == "__main__":
    main()
