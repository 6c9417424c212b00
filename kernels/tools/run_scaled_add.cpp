// run_scaled_add GOLDEN CANDIDATE: runs kernels/scaled_add.cu (v1) on a scaled_add golden's inputs
// and writes the candidate HDF5 (/outputs/out as bf16 codes) for `assay compare`.
// Exit 125 (could not run) without a GPU or for a case the kernel cannot implement (non-bf16).
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>
#include <toml++/toml.h>

#include "kernels/scaled_add.h"
#include "reference/core/check.h"
#include "verify/golden.h"
#include "verify/h5.h"

int main(int argc, char** argv) {
  using namespace assay;
  if (argc != 3) {
    std::fprintf(stderr, "usage: run_scaled_add GOLDEN CANDIDATE\n");
    return 2;
  }
  try {
    const Golden g = read_golden(argv[1]);
    const auto* x = g.input("x");
    const auto* y = g.input("y");
    const auto* out = g.output("out");
    if (g.prov.op != "scaled_add" || !x || !y || !out) throw InputError(std::string(argv[1]) + ": not a scaled_add golden");
    if (x->dtype != DType::bf16 || y->dtype != DType::bf16 || out->expected.dtype != DType::bf16) {
      std::printf("NotSupported %s: v1 implements bf16 in/out only\n", argv[1]);
      return 125;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
      std::printf("NotRun %s: no CUDA device\n", argv[1]);
      return 125;
    }
    // alpha/beta from the case text are not parsed here: the fixture binding owns them. The
    // golden's case text is TOML; read the two scalars with the same parser.
    const auto t = toml::parse(g.prov.case_toml);
    const auto* c = t["case"].as_array() ? t["case"].as_array()->get(0)->as_table() : nullptr;
    if (!c) throw InputError(std::string(argv[1]) + ": case_toml: no [[case]] table");
    const float alpha = static_cast<float>((*c)["alpha"].value<double>().value_or(1.0));
    const float beta = static_cast<float>((*c)["beta"].value<double>().value_or(1.0));
    const size_t n = x->data.size();
    std::vector<uint16_t> hx(n), hy(n), ho(n);
    for (size_t i = 0; i < n; ++i) hx[i] = static_cast<uint16_t>(encode(DType::bf16, x->data[i])),
                                    hy[i] = static_cast<uint16_t>(encode(DType::bf16, y->data[i]));
    void *dx, *dy, *dout;
    ASSAY_CHECK(cudaMalloc(&dx, n * 2 + 2) == cudaSuccess && cudaMalloc(&dy, n * 2 + 2) == cudaSuccess &&
                    cudaMalloc(&dout, n * 2 + 2) == cudaSuccess, "cudaMalloc failed");
    cudaMemcpy(dx, hx.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dy, hy.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xFF, n * 2);  // NaN poison: an unwritten element cannot pass
    cudaError_t e = kernels::scaled_add_v1(dx, dy, dout, alpha, beta, static_cast<int64_t>(n), nullptr);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      std::printf("Failed %s: %s\n", argv[1], cudaGetErrorString(e));
      return 1;
    }
    cudaMemcpy(ho.data(), dout, n * 2, cudaMemcpyDeviceToHost);
    auto f = h5::File::create(argv[2]);
    f.create_group("/outputs");
    f.write("/outputs/out", h5::Elem::u16, out->expected.shape, ho.data());
    f.set_attr("/outputs/out", "dtype", std::string("bf16"));
    return 0;
  } catch (const InputError& e) {
    std::fprintf(stderr, "run_scaled_add: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "run_scaled_add: %s\n", e.what());
    return 125;
  }
}
