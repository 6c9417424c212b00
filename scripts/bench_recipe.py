#!/usr/bin/env python3
"""Time assay.recipe.generate_codes (python/assay/recipe.py) on one recipe at several thread counts.

  PYTHONPATH=python .venv/bin/python scripts/bench_recipe.py --log2n 26 --threads 1,2
  PYTHONPATH=python .venv/bin/python scripts/bench_recipe.py --kind uniform --dtype fp8e4m3 --repeat 3

prints one line per thread count: the best of --repeat runs in seconds and in elements a second.
A run makes the codes of a 2^log2n-element tensor (--kind, --dtype; l2norm rows of 128), the
rejected polar attempts and the rounding included; the default thread count is what
generate_codes uses when it is not told (the CPUs this process may use, at most
assay.recipe.MAX_THREADS, or $ASSAY_RECIPE_THREADS). Shared VMs drift between runs: compare figures
taken in one invocation.
"""
import argparse
import time

from assay import recipe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=24, help="elements: 2^LOG2N (default 24)")
    ap.add_argument("--kind", default="normal", choices=["normal", "uniform", "int", "l2norm", "log_gate", "const"])
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--threads", default="", help="comma-separated thread counts (default: 1 and the default)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per thread count, the best kept")
    a = ap.parse_args()
    n = 1 << a.log2n
    shape = (n // 128, 128) if a.kind == "l2norm" else (n,)
    lo_hi = {"int": (-8.0, 8.0), "uniform": (-1.0, 1.0), "log_gate": (-5.0, 0.0)}.get(a.kind, (0.0, 1.0))
    r = recipe.Recipe(stream="bench/recipe/x", seed=1, kind=a.kind, a=lo_hi[0], b=lo_hi[1], scale=1.0, dtype=a.dtype, shape=shape)
    default = recipe._threads()
    threads = [int(t) for t in a.threads.split(",")] if a.threads else sorted({1, default})
    print(f"{a.kind} {a.dtype}, 2^{a.log2n} elements; default threads here: {default}")
    for t in threads:
        best = min(_time(r, t) for _ in range(max(1, a.repeat)))
        print(f"  threads={t}: {best:.2f} s, {n / best / 1e6:.1f} M elements/s", flush=True)


def _time(r, t: int) -> float:
    t0 = time.perf_counter()
    recipe.generate_codes(r, threads=t)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
