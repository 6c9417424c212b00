// `assay __worker`: runs one kernel on one golden inside its own process (protocol: worker.h).
// Compiled only in CUDA builds (ASSAY_CUDA): the parent process never touches the GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/registry.h"
#include "reference/core/check.h"
#include "verify/io/golden.h"
#include "verify/run/kernel_case.h"
#include "verify/run/relations.h"
#include "verify/io/h5.h"
#include "verify/run/worker.h"

namespace assay::worker {
namespace {

std::string nvidia_driver_version() {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "unknown (no /proc/driver/nvidia/version)";
  static const std::regex re(R"(\s([0-9]{2,4}\.[0-9]+(\.[0-9]+)?)\s)");
  std::smatch m;
  return std::regex_search(line, m, re) ? m[1].str() : line;
}

std::string ver(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

nlohmann::json device_json(int dev) {
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, dev);
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  char pci[64] = {0};
  cudaDeviceGetPCIBusId(pci, sizeof pci, dev);
  std::string uuid;
  for (int i = 0; i < 16; ++i) uuid += fmt::format("{:02x}", static_cast<unsigned char>(p.uuid.bytes[i]));
  return {{"name", p.name},
          {"compute_capability", fmt::format("{}.{}", p.major, p.minor)},
          {"sm_count", p.multiProcessorCount},
          {"memory_gib", static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024 * 1024)},
          {"driver", nvidia_driver_version()},
          {"cuda_driver_api", ver(drv)},
          {"cuda_runtime", ver(rt)},
          {"pci_bus_id", pci},
          {"uuid", uuid},
          {"cuda_visible_devices", std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : ""}};
}

std::string cuda_msg(const char* what, cudaError_t e) {
  return fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

struct Result {
  nlohmann::json j = nlohmann::json::object();
  std::string path;
  void write() const {
    if (path.empty()) return;
    std::ofstream(path) << j.dump(2) << "\n";
  }
};

h5::Elem code_elem(size_t bytes) {
  switch (bytes) {
    case 1: return h5::Elem::u8;
    case 2: return h5::Elem::u16;
    case 4: return h5::Elem::u32;
    default: return h5::Elem::u64;
  }
}

struct DevBuf {
  uint8_t* base = nullptr;  // [guard][payload][guard]
  size_t payload = 0;
  uint8_t* data() const { return base + kGuardBytes; }
};

}  // namespace

int worker_main(const WorkerArgs& a) {
  Result res;
  if (!a.out_dir.empty()) {
    std::filesystem::create_directories(a.out_dir);
    res.path = a.out_dir + "/result.json";
  }
  auto fail = [&](const std::string& status, const std::string& msg, int code) {
    res.j["status"] = status;
    res.j["message"] = msg;
    res.write();
    std::fprintf(stderr, "assay worker: %s: %s\n", status.c_str(), msg.c_str());
    return code;
  };
  int ndev = 0;
  if (cudaError_t e = cudaGetDeviceCount(&ndev); e != cudaSuccess || ndev == 0)
    return fail("no_device", e != cudaSuccess ? cuda_msg("cudaGetDeviceCount", e) : "no CUDA device visible", kExitNoDevice);
  if (cudaError_t e = cudaSetDevice(0); e != cudaSuccess) return fail("no_device", cuda_msg("cudaSetDevice(0)", e), kExitNoDevice);
  res.j["device"] = device_json(0);
  if (a.probe) {
    std::cout << res.j["device"].dump() << "\n";
    return kExitOk;
  }

  Golden g;
  const kernels::KernelDef* k = nullptr;
  try {
    for (const auto& p : a.plugins) kernels::load_plugin(p);
    k = kernels::find_kernel(a.kernel);
    if (!k) return fail("input_error", fmt::format("unknown kernel '{}'", a.kernel), kExitInput);
    // Recipe inputs: codes made below (and checked against their recorded hashes there, one
    // regeneration), never fp64 values of the whole; the relations derive their inputs from the
    // values, so with --relations they are regenerated whole.
    g = a.relations ? read_golden(a.golden, true) : read_golden_recipes_unhashed(a.golden);
    if (!g.recipe_stale.empty()) return fail("input_error", g.recipe_stale, kExitInput);
  } catch (const std::exception& e) {
    return fail("input_error", e.what(), kExitInput);
  }
  res.j["kernel"] = k->name;
  res.j["kernel_source"] = k->source;

  // The kernel sees the KernelCase and device buffers; `g` (expected values included) stays here.
  const kernels::KernelCase kc = kernel_case_of(g);
  kernels::LaunchContext ctx;
  ctx.kcase = &kc;
  ctx.params = kc.fields;
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return fail("cuda_error", cuda_msg("cudaStreamCreate", e), kExitCuda);
  ctx.stream = stream;
  // Host -> device copies go on the kernel's stream and are waited for. A plain cudaMemcpy from
  // pageable memory runs on the legacy stream and may return before its DMA lands; the kernel's
  // non-blocking stream does not wait for it, so under load the poison fill could land after (and
  // over) the kernel's outputs, or the kernel could read half-uploaded inputs.
  auto upload = [&](void* dst, const void* src, size_t n) -> cudaError_t {
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream); e != cudaSuccess) return e;
    return cudaStreamSynchronize(stream);
  };

  // Inputs: storage codes, uploaded once; a host copy is kept to detect kernels that write them.
  std::vector<std::vector<uint8_t>> in_host;
  for (size_t ii = 0; ii < g.inputs.size(); ++ii) {
    const auto& t = g.inputs[ii];
    const size_t eb = static_cast<size_t>(info(t.dtype).storage_bytes);
    std::vector<uint8_t> h;
    if (input_is_recipe(g, ii) && static_cast<int64_t>(t.data.size()) != numel(t.shape)) {
      try {
        h = gen::recipe_codes(*g.input_recipes[ii], t.name, [&](std::string_view f, std::string_view m) {
          throw InputError(fmt::format("{}: /inputs/{}: recipe: {}: {}", a.golden, t.name, f, m));
        });
      } catch (const std::exception& e) {
        return fail("input_error", e.what(), kExitInput);
      }
      if (const std::string hh = gen::codes_hash(*g.input_recipes[ii], t.name, h); hh != g.input_hashes[ii])
        return fail("input_error",
                    fmt::format("{}: /inputs/{}: regenerated from its recipe, the codes hash to {} but the golden recorded {}",
                                a.golden, t.name, hh, g.input_hashes[ii]),
                    kExitInput);
    } else {
      h.resize(t.data.size() * eb);
      for (size_t i = 0; i < t.data.size(); ++i) {
        const uint64_t c = encode(t.dtype, t.data[i]);
        std::memcpy(h.data() + i * eb, &c, eb);
      }
    }
    void* d = nullptr;
    if (cudaError_t e = cudaMalloc(&d, std::max<size_t>(h.size(), 1)); e != cudaSuccess)
      return fail("cuda_error", cuda_msg(fmt::format("cudaMalloc input '{}'", t.name).c_str(), e), kExitCuda);
    if (cudaError_t e = upload(d, h.data(), h.size()); e != cudaSuccess)
      return fail("cuda_error", cuda_msg(fmt::format("upload input '{}'", t.name).c_str(), e), kExitCuda);
    ctx.inputs.push_back({t.name, t.axes, t.shape, t.dtype, d});
    in_host.push_back(std::move(h));
  }
  // Output buffers: the golden's outputs, then the intermediates the kernel declares for this case
  // (KernelDef::intermediates) that the golden holds. Both get guard bands and poison.
  // A sampled golden's outputs (Output::sampled): the kernel writes the whole tensor.
  std::vector<const Tensor*> buf_t;
  std::deque<Tensor> whole;
  for (const auto& o : g.outputs) {
    if (!o.sampled) {
      buf_t.push_back(&o.expected);
      continue;
    }
    whole.push_back(Tensor{o.expected.name, o.full_axes, o.full_shape, o.expected.dtype, {}});
    buf_t.push_back(&whole.back());
  }
  const size_t n_out = buf_t.size();
  for (const auto& n : k->intermediates)
    if (const Tensor* t = g.intermediate(n)) buf_t.push_back(t);
  std::vector<DevBuf> outs;
  for (size_t bi = 0; bi < buf_t.size(); ++bi) {
    const Tensor& e = *buf_t[bi];
    DevBuf b;
    b.payload = static_cast<size_t>(numel(e.shape)) * static_cast<size_t>(info(e.dtype).storage_bytes);
    void* p = nullptr;
    if (cudaError_t er = cudaMalloc(&p, b.payload + 2 * kGuardBytes); er != cudaSuccess)
      return fail("cuda_error", cuda_msg(fmt::format("cudaMalloc output '{}'", e.name).c_str(), er), kExitCuda);
    b.base = static_cast<uint8_t*>(p);
    outs.push_back(b);
    (bi < n_out ? ctx.outputs : ctx.intermediates).push_back({e.name, e.axes, e.shape, e.dtype, b.data()});
  }

  std::vector<std::string> findings;
  std::vector<double> kernel_ms;
  // runs x outputs x bytes
  std::vector<std::vector<std::vector<uint8_t>>> got(static_cast<size_t>(a.runs));
  cudaEvent_t ev0, ev1;
  cudaEventCreate(&ev0);
  cudaEventCreate(&ev1);
  for (int r = 0; r < a.runs; ++r) {
    // Guard bands and poison, written from the host so the kernel sees exactly these bytes.
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto dt = buf_t[i]->dtype;
      std::vector<uint8_t> h(outs[i].payload + 2 * kGuardBytes);
      fill_guard(h.data(), kGuardBytes);
      fill_code(h.data() + kGuardBytes, outs[i].payload / static_cast<size_t>(info(dt).storage_bytes),
                static_cast<size_t>(info(dt).storage_bytes), poison_code(dt, r));
      fill_guard(h.data() + kGuardBytes + outs[i].payload, kGuardBytes);
      if (cudaError_t e = upload(outs[i].base, h.data(), h.size()); e != cudaSuccess)
        return fail("cuda_error", cuda_msg("upload (poison)", e), kExitCuda);
    }
    cudaEventRecord(ev0, stream);
    std::string err;
    try {
      err = k->launch(ctx);
    } catch (const std::exception& e) {
      err = std::string("launch threw: ") + e.what();
    }
    if (!err.empty()) return fail("launch_error", fmt::format("run {}: {}", r, err), kExitCuda);
    cudaEventRecord(ev1, stream);
    // The whole device: a kernel may also have put work on streams other than ctx.stream.
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
      return fail("cuda_error", fmt::format("run {}: {}", r, cuda_msg("after the kernel", e)), kExitCuda);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return fail("cuda_error", fmt::format("run {}: {}", r, cuda_msg("after the kernel", e)), kExitCuda);
    float ms = 0;
    cudaEventElapsedTime(&ms, ev0, ev1);
    kernel_ms.push_back(ms);
    for (size_t i = 0; i < outs.size(); ++i) {
      std::vector<uint8_t> h(outs[i].payload + 2 * kGuardBytes);
      if (cudaError_t e = cudaMemcpy(h.data(), outs[i].base, h.size(), cudaMemcpyDeviceToHost); e != cudaSuccess)
        return fail("cuda_error", cuda_msg("cudaMemcpy (download)", e), kExitCuda);
      const auto& nm = buf_t[i]->name;
      if (auto c = check_guard(h.data(), kGuardBytes); c.changed)
        findings.push_back(fmt::format("run {}: {}", r, describe_guard(nm, true, c, kGuardBytes)));
      if (auto c = check_guard(h.data() + kGuardBytes + outs[i].payload, kGuardBytes); c.changed)
        findings.push_back(fmt::format("run {}: {}", r, describe_guard(nm, false, c, kGuardBytes)));
      got[static_cast<size_t>(r)].emplace_back(h.begin() + kGuardBytes, h.begin() + kGuardBytes + outs[i].payload);
    }
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      std::vector<uint8_t> h(in_host[i].size());
      if (!h.empty()) cudaMemcpy(h.data(), ctx.inputs[i].data, h.size(), cudaMemcpyDeviceToHost);
      if (h != in_host[i]) {
        size_t n = 0;
        for (size_t b = 0; b < h.size(); ++b) n += h[b] != in_host[i][b];
        findings.push_back(fmt::format("run {}: input '{}' was modified by the kernel ({} bytes)", r, ctx.inputs[i].name, n));
      }
    }
  }

  // Relations (verify/run/relations.h): the kernel again on cases derived from the golden's inputs,
  // each related run once, its outputs poisoned like the case's own.
  std::vector<relations::Check> checks;
  std::vector<relations::Executed> executed;
  if (a.relations && !k->relations.empty()) {
    try {
      checks = relations::plan_checks(g, k->relations, k->batch_invariant);
    } catch (const std::exception& e) {
      return fail("input_error", std::string("planning the relations: ") + e.what(), kExitInput);
    }
    const relations::RunFn run = [&](const kernels::KernelCase& rkc, const std::vector<Tensor>& ins,
                                     std::map<std::string, std::vector<uint64_t>>& codes) -> std::string {
      kernels::LaunchContext rc;
      rc.kcase = &rkc;
      rc.params = rkc.fields;
      rc.stream = stream;
      std::vector<void*> bufs;
      auto release = [&] {
        cudaDeviceSynchronize();
        for (void* b : bufs) cudaFree(b);
      };
      for (const auto& t : ins) {
        const size_t eb = static_cast<size_t>(info(t.dtype).storage_bytes);
        std::vector<uint8_t> h(t.data.size() * eb);
        for (size_t i = 0; i < t.data.size(); ++i) {
          const uint64_t c = encode(t.dtype, t.data[i]);
          std::memcpy(h.data() + i * eb, &c, eb);
        }
        void* d = nullptr;
        if (cudaError_t e = cudaMalloc(&d, std::max<size_t>(h.size(), 1)); e != cudaSuccess) {
          release();
          return cuda_msg("cudaMalloc (relation input)", e);
        }
        bufs.push_back(d);
        if (cudaError_t e = upload(d, h.data(), h.size()); e != cudaSuccess) {
          release();
          return cuda_msg("upload (relation input)", e);
        }
        rc.inputs.push_back({t.name, t.axes, t.shape, t.dtype, d});
      }
      for (const auto& o : rkc.outputs) {
        const size_t eb = static_cast<size_t>(info(o.dtype).storage_bytes), n = static_cast<size_t>(o.numel());
        std::vector<uint8_t> h(n * eb);
        fill_code(h.data(), n, eb, poison_code(o.dtype, 0));
        void* d = nullptr;
        if (cudaError_t e = cudaMalloc(&d, std::max<size_t>(h.size(), 1)); e != cudaSuccess) {
          release();
          return cuda_msg("cudaMalloc (relation output)", e);
        }
        bufs.push_back(d);
        if (cudaError_t e = upload(d, h.data(), h.size()); e != cudaSuccess) {
          release();
          return cuda_msg("upload (relation poison)", e);
        }
        rc.outputs.push_back({o.name, o.axes, o.shape, o.dtype, d});
      }
      std::string err;
      try {
        err = k->launch(rc);
      } catch (const std::exception& e) {
        err = std::string("launch threw: ") + e.what();
      }
      if (err.empty())
        if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) err = cuda_msg("after the kernel", e);
      if (err.empty())
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) err = cuda_msg("after the kernel", e);
      for (size_t i = 0; err.empty() && i < rc.outputs.size(); ++i) {
        const auto& o = rc.outputs[i];
        const size_t eb = static_cast<size_t>(info(o.dtype).storage_bytes), n = static_cast<size_t>(o.numel());
        std::vector<uint8_t> h(n * eb);
        if (cudaError_t e = cudaMemcpy(h.data(), o.data, h.size(), cudaMemcpyDeviceToHost); e != cudaSuccess) {
          err = cuda_msg("cudaMemcpy (relation download)", e);
          break;
        }
        codes[o.name] = unpack_codes(h.data(), n, eb);
      }
      release();
      return err;
    };
    const relations::SupportFn support = [&](const kernels::KernelCase& rkc) {
      return k->can_implement ? k->can_implement(rkc) : kernels::Support{};
    };
    for (const auto& c : checks) {
      if (!c.not_applicable.empty()) {
        executed.emplace_back();
        continue;
      }
      executed.push_back(relations::execute_check(c, g, support, run));
      // A sticky CUDA error ends the worker: the case is Failed, like a failed launch of its own.
      if (executed.back().status == "error" && cudaGetLastError() != cudaSuccess)
        return fail("cuda_error", fmt::format("relation {}: {}", c.name, executed.back().message), kExitCuda);
    }
  }

  if (!a.out_dir.empty()) {
    try {
      auto f = h5::File::create(a.out_dir + "/candidate.h5");
      for (int r = 0; r < a.runs; ++r) {
        const std::string grp = r == 0 ? "/outputs" : fmt::format("/run{}", r);
        f.create_group(grp);
        if (r == 0 && outs.size() > n_out) f.create_group("/intermediates");
        for (size_t i = 0; i < outs.size(); ++i) {
          const Tensor& e = *buf_t[i];
          if (i >= n_out && r > 0) continue;  // determinism is checked on outputs
          const std::string ds = (i < n_out ? grp : std::string("/intermediates")) + "/" + e.name;
          const auto elem = code_elem(static_cast<size_t>(info(e.dtype).storage_bytes));
          if (i < n_out && g.outputs[i].sampled) {  // only the sampled elements: what compare judges
            const auto& offs = g.outputs[i].sample_offsets;
            const size_t w = static_cast<size_t>(info(e.dtype).storage_bytes);
            std::vector<uint8_t> pick(offs.size() * w);
            for (size_t k = 0; k < offs.size(); ++k)
              std::memcpy(pick.data() + k * w, got[static_cast<size_t>(r)][i].data() + static_cast<size_t>(offs[k]) * w, w);
            f.write(ds, elem, {static_cast<int64_t>(offs.size())}, pick.data());
          } else {
            f.write(ds, elem, e.shape, got[static_cast<size_t>(r)][i].data());
          }
          f.set_attr(ds, "dtype", std::string(name(e.dtype)));
        }
      }
      relations::write_executed(f, g, checks, executed);
      f.set_attr("/", "kernel", k->name);
      f.set_attr("/", "golden", a.golden);
      f.close();
    } catch (const std::exception& e) {
      return fail("error", std::string("writing the candidate: ") + e.what(), kExitCuda);
    }
  }
  // Free everything: memcheck's leak check (assay sanitize) must see a clean worker.
  for (auto& t : ctx.inputs) cudaFree(t.data);
  for (auto& b : outs) cudaFree(b.base);
  cudaEventDestroy(ev0);
  cudaEventDestroy(ev1);
  cudaStreamDestroy(stream);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return fail("cuda_error", cuda_msg("at teardown", e), kExitCuda);
  cudaDeviceReset();
  res.j["status"] = "ok";
  res.j["findings"] = findings;
  res.j["kernel_ms"] = kernel_ms;
  res.j["runs"] = a.runs;
  res.write();
  return kExitOk;
}

}  // namespace assay::worker
