// Fresh buffers for the parallel oracle forms (reference/ssd, reference/gated_delta).
//
// Page faults are a large part of these forms' time: hundreds of MB of fresh outputs and scratch per
// call, and on a VM a 4 KiB fault costs about as much as writing the page several times. Both
// helpers ask for transparent huge pages (MADV_HUGEPAGE: one fault maps 2 MiB; with THP in
// "madvise" mode, the default of many distributions, nothing else would give them) and spread the
// faulting over the threads. Only the speed depends on any of this.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <utility>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace assay {

namespace detail {

constexpr uintptr_t kPage = 4096, kHugePage = uintptr_t{2} << 20;

// MADV_HUGEPAGE on the 2 MiB-aligned part of [p, p + bytes) (a hint, ignored where unsupported).
inline void advise_huge(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const auto base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (base + kHugePage - 1) & ~(kHugePage - 1), hi = (base + bytes) & ~(kHugePage - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace detail

// Reserves n doubles in the empty vector v and has all threads fault its pages in (MADV_POPULATE_WRITE
// on 2 MiB slices; a hint, ignored where unsupported). v.resize(n), std::vector's serial zero fill
// (it cannot skip it), is left to the caller, which can run the fills of several outputs on
// different threads, next to other work (see gated_delta's chunked form). First-touching hundreds
// of MB of fresh pages from one thread is otherwise the serial part of the chunked forms.
inline void reserve_prefaulted(std::vector<double>& v, size_t n) {
  v.reserve(n);
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  using detail::kHugePage, detail::kPage;
  const auto base = reinterpret_cast<uintptr_t>(v.data());
  const uintptr_t lo = (base + kPage - 1) & ~(kPage - 1), hi = (base + n * sizeof(double)) & ~(kPage - 1);
  if (hi > lo + 4 * kHugePage) {
    detail::advise_huge(v.data(), n * sizeof(double));
    const auto slices = static_cast<int64_t>((hi - lo + kHugePage - 1) / kHugePage);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < slices; ++s) {
      const uintptr_t a = lo + static_cast<uintptr_t>(s) * kHugePage;
      madvise(reinterpret_cast<void*>(a), std::min(kHugePage, hi - a), MADV_POPULATE_WRITE);
    }
  }
#endif
}

// n zeros, pages faulted in by all threads (reserve_prefaulted), then zero-filled.
inline std::vector<double> zeros_prefaulted(size_t n) {
  std::vector<double> v;
  reserve_prefaulted(v, n);
  v.resize(n);
  return v;
}

// The zero fills (resize) of several reserved vectors, each on its own thread: a fill cannot be
// split, but the fills of different outputs can run side by side.
inline void resize_concurrently(std::initializer_list<std::pair<std::vector<double>*, size_t>> outs) {
  const std::vector<std::pair<std::vector<double>*, size_t>> o(outs);
  const auto no = static_cast<int64_t>(o.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < no; ++i) o[i].first->resize(o[i].second);
}

// Uninitialised scratch of n doubles, for buffers that a parallel pass writes before anything
// reads them (their pages are then first touched by the threads that write them). At 8 MiB and
// more it is its own 2 MiB-aligned mapping advised for huge pages.
struct ScratchFree {
  size_t mapped = 0;  // bytes mapped (0: allocated with new[])
  void operator()(double* p) const {
#if defined(__linux__)
    if (mapped) {
      munmap(p, mapped);
      return;
    }
#endif
    delete[] p;
  }
};
using Scratch = std::unique_ptr<double[], ScratchFree>;

inline Scratch scratch(size_t n) {
#if defined(__linux__)
  using detail::kHugePage;
  const size_t bytes = (n * sizeof(double) + kHugePage - 1) & ~(kHugePage - 1);
  if (bytes >= 4 * kHugePage) {
    void* m = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      // Keep the 2 MiB-aligned [a, a + bytes), unmap the slack around it.
      const auto base = reinterpret_cast<uintptr_t>(m);
      const uintptr_t a = (base + kHugePage - 1) & ~(kHugePage - 1);
      if (a > base) munmap(m, a - base);
      if (base + bytes + kHugePage > a + bytes) munmap(reinterpret_cast<void*>(a + bytes), base + kHugePage - a);
      detail::advise_huge(reinterpret_cast<void*>(a), bytes);
      return Scratch(reinterpret_cast<double*>(a), ScratchFree{bytes});
    }
  }
#endif
  return Scratch(new double[n], ScratchFree{});
}

// Scratch that outlives the call: a form that works through its data in windows keeps its window
// buffers in one of these (thread_local in the form, so concurrent callers never share one), and
// its pages are faulted in once per calling thread instead of once per call. get(n) returns at
// least n doubles, uninitialised (whatever the last call left there); it grows, never shrinks.
struct ReusedScratch {
  Scratch buf;
  size_t cap = 0;
  double* get(size_t n) {
    if (n > cap) {
      buf.reset();
      buf = scratch(n);
      cap = n;
    }
    return buf.get();
  }
};

// A process policy for the executables (assay, bench_oracles), never for the library: freed memory
// stays with the process, so the next call's fresh outputs reuse pages that are already mapped.
// glibc otherwise maps each block above its mmap threshold (128 KiB, rising with use to at most
// 32 MiB) on its own and unmaps it when freed, and gives the heap's free top back to the kernel; on
// a VM the next first touch of such pages
// then costs the host's faults too: measured on a 2-core VM, prefaulting the 71 MB of a chunked SSD
// call's fresh outputs took 8 - 160 ms against 2 ms when they are reused. Here malloc serves every
// size from its heap and keeps up to 2 GiB free at its top. Only the speed and the process's
// resident memory after a peak depend on it. Returns false where it is not supported.
inline bool keep_freed_memory() {
#if defined(__GLIBC__)
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1;
#else
  return false;
#endif
}

}  // namespace assay
