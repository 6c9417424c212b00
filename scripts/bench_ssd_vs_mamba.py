#!/usr/bin/env python3
"""ssd_chunked_mma vs mamba_ssm's Triton `mamba_chunk_scan_combined` on the same shapes and GPU.

Runs the bench_ssd binary (kernels/ssd/bench_ssd.cu), reads its JSON lines (B, T, H, P, N, G, Q,
ms), times mamba_chunk_scan_combined on every shape it reports with the same options (bf16 x, z,
B, C; fp32 dt, A < 0, D, dt_bias; dt_softplus, the default dt_limit; return_final_states), and
prints the throughput ratio ours / upstream (= upstream ms / our ms) per shape, plus a JSON file.
mamba_ssm's Triton sources are loaded as the conformance runner loads them
(conformance/upstreams/ssd.py: $MAMBA_SSM_SRC, .upstream/mamba_ssm-*, or an installed package).
Timing: median of per-call CUDA event times after warm-up (bench_util.h's time_ms). A benchmark,
not a test.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common  # noqa: E402


def time_upstream(torch, fn, r, iters):
    B, T, H, P, N, G, Q = (r[k] for k in ("B", "T", "H", "P", "N", "G", "Q"))
    u, f32 = bench_common.uniform_maker(torch), torch.float32
    x, z = u(B, T, H, P), u(B, T, H, P)
    Bm, Cm = u(B, T, G, N), u(B, T, G, N)
    dt = u(B, T, H, lo=-4.0, hi=-1.0, dtype=f32)
    A = u(H, lo=-8.0, hi=-1.0, dtype=f32)
    D = u(H, lo=0.5, hi=1.5, dtype=f32)
    dt_bias = u(H, dtype=f32)
    return bench_common.median_ms(torch, lambda: fn(x, dt, A, Bm, Cm, Q, D=D, z=z, dt_bias=dt_bias, dt_softplus=True,
                                                    return_final_states=True), iters)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default="bench_ssd.json")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    import torch
    from conformance.upstreams import ssd as up

    fn = up.load("ops.triton.ssd_combined").mamba_chunk_scan_combined
    rows = bench_common.run_binary(a.bin, a.iters, "bench_ssd")
    print(f"mamba_ssm {up.version()}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'shape':<34} {'ours ms':>9} {'mamba ms':>9} {'ours/mamba':>10}")
    for r in rows:
        r["upstream_ms"] = time_upstream(torch, fn, r, a.iters)
        r["ratio"] = r["upstream_ms"] / r["ms"]
        shape = "B{B} T{T} H{H} P{P} N{N} G{G} Q{Q}".format(**r)
        print(f"{shape:<34} {r['ms']:>9.3f} {r['upstream_ms']:>9.3f} {r['ratio']:>9.2f}x")
    bench_common.write_json(a.out, rows)


if __name__ == "__main__":
    main()
