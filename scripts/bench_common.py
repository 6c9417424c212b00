"""What the benchmark drivers against upstream kernels share (scripts/bench_*_vs_*.py): running a
bench_<op> binary for its JSON lines, seeded uniform inputs on the GPU, and the timing rule of
kernels/bench/bench_util.h's time_ms (median of per-call CUDA event times after warm-up)."""
import json
import statistics
import subprocess
import sys


def run_binary(path, iters, name):
    """The JSON lines a bench_<op> binary prints; exits with its stderr if it fails."""
    proc = subprocess.run([path, "--iters", str(iters)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{name}: {path} failed ({proc.returncode}): {proc.stderr.strip()}")
    return [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]


def uniform_maker(torch, seed=7):
    """u(*shape, lo=-1, hi=1, dtype=bf16): uniform [lo, hi) on the GPU from one seeded generator."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def u(*shape, lo=-1.0, hi=1.0, dtype=torch.bfloat16):
        return (torch.rand(*shape, device="cuda", generator=g) * (hi - lo) + lo).to(dtype)
    return u


def median_ms(torch, call, iters, warmup=3):
    """Median milliseconds of `iters` calls, each timed alone with CUDA events, after `warmup`."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    ms = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms)


def write_json(path, rows):
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)
