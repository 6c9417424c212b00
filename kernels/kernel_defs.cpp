// Anchor of the assay_kernel_defs object library (kernels/CMakeLists.txt): the per-op
// registrations (kernels/<op>/<op>.cpp) are added to it by assay_add_kernels().
namespace assay::kernels {
extern const int kKernelDefsAnchor = 0;
}  // namespace assay::kernels
