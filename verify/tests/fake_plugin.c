/* A CPU-only assay plugin for the loader tests (never launched): FAKE_ABI 1 lays its kernel table
 * out as ABI version 1 did (no precision_profile); FAKE_ABI 2 as versions 2 and 3 did (with
 * FAKE_PROFILE as the kernel's precision profile, no intermediates); FAKE_ABI 4 uses this header's
 * layout, its first kernel declaring the intermediate "chunk_states". */
#include "kernels/plugin/assay_plugin.h"

static int fake_launch(const assay_case* c, void* stream, char* err, size_t err_len) {
  (void)c, (void)stream, (void)err, (void)err_len;
  return 1;
}

#if FAKE_ABI == 1
typedef struct {
  const char *op, *name, *description;
  uint32_t flags;
  int (*can_implement)(const assay_case*, char*, size_t);
  int (*launch)(const assay_case*, void*, char*, size_t);
} kernel_v1;
static const kernel_v1 kKernels[2] = {{"scaled_add", "fake_v1_a", "", 0u, 0, fake_launch},
                                      {"scaled_add", "fake_v1_b", "", 0u, 0, fake_launch}};
#elif FAKE_ABI < 4
typedef struct {
  const char *op, *name, *description;
  uint32_t flags;
  int (*can_implement)(const assay_case*, char*, size_t);
  int (*launch)(const assay_case*, void*, char*, size_t);
  const char* precision_profile;
} kernel_v2;
static const kernel_v2 kKernels[2] = {{"scaled_add", FAKE_NAME "_a", "", 0u, 0, fake_launch, FAKE_PROFILE},
                                      {"scaled_add", FAKE_NAME "_b", "", 0u, 0, fake_launch, FAKE_PROFILE}};
#else
static const char* const kInter[1] = {"chunk_states"};
static const assay_kernel kKernels[2] = {{"scaled_add", FAKE_NAME "_a", "", 0u, 0, fake_launch, FAKE_PROFILE, kInter, 1},
                                         {"scaled_add", FAKE_NAME "_b", "", 0u, 0, fake_launch, FAKE_PROFILE, 0, 0}};
#endif

static const assay_plugin kPlugin = {FAKE_ABI, sizeof(assay_plugin), "fake", 2, (const assay_kernel*)kKernels};
const assay_plugin* assay_plugin_entry(void) { return &kPlugin; }
