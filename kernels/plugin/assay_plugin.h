/* assay plugin C ABI, version 4: how an external kernel library (.so) registers kernels with
 * `assay verify --plugin path.so`.
 *
 * The library exports one symbol:
 *     const assay_plugin* assay_plugin_entry(void);
 * returning a table that lives as long as the library is loaded. assay checks abi_version
 * (1 to 4) and struct_size (>= sizeof(assay_plugin)) before reading anything else, and
 * refuses the library with one line otherwise.
 *
 * Version 4 (this header) lets a kernel hand back intermediates (chunk states, split partials,
 * ...), so that a wrong one fails the case in a row of its own and `assay bisect` can walk them:
 * assay_kernel gains `intermediates` / `n_intermediates`, the names of the golden's
 * /intermediates it writes, and assay_case gains `intermediates`: in can_implement every
 * intermediate the golden holds (data NULL), in launch the declared ones the golden holds, each
 * allocated and poisoned like an output, to be written whole in its dtype's codes. A name the
 * golden does not hold is skipped. Versions 1 to 3 still load (without intermediates).
 *
 * Version 3 (this header) hands kernels the case's resolved fields: every field the op's fixture
 * read, with its default applied where the case file left it out (what the golden's /case group
 * holds). get_double / get_int answer from them (for every version: older libraries get the
 * defaults too), and assay_case gains fields_toml, get_string and get_list. A kernel is never
 * given expected values or bounds. Version 1 and 2 libraries still load.
 *
 * Version 2 (this header) adds assay_kernel.precision_profile: how the kernel computes, which
 * selects the tolerance entries it is judged by ("strict" or NULL: rounding to the storage dtypes
 * only; otherwise a profile the op's fixtures/<op>.toml declares under [profiles], e.g. "tf32",
 * "bf16-states", "fp8-p"). An unknown profile refuses the library. Version 1 libraries (built
 * against the old header, whose assay_kernel ends at `launch`) still load, as "strict".
 *
 * Calls:
 *   can_implement(case, reason, reason_len): called in the parent process, WITHOUT a CUDA context;
 *     tensors' data pointers are NULL. Return 1 if the kernel handles this case, else 0 and write a
 *     one-line reason (NUL-terminated, at most reason_len bytes) -> verdict NotSupported.
 *   launch(case, stream, err, err_len): called in a worker process after the inputs were uploaded
 *     and the outputs allocated, guarded by canaries and poisoned with NaN. Enqueue the work on
 *     `stream` (a cudaStream_t) and return 0; assay synchronizes. A nonzero return (with err
 *     filled) is a Failed verdict. The kernel must write every output element and nothing else.
 *
 * Tensors are dense row-major. Inputs hold the golden's storage codes (bf16 as uint16 bits, fp8 as
 * one byte, fp4 e2m1 one code per byte, ...); outputs must be written as codes of the output's
 * dtype (the golden's kernel-facing dtype). dtype names are assay's canonical ones: "fp64",
 * "fp32", "bf16", "fp16", "fp8e4m3", "fp8e5m2", "fp4e2m1", "ue8m0", "int8", "uint8", "int32", ...
 * Case fields (alpha, eps, chunk sizes, recipe names, seqlens ...) are read with get_double /
 * get_int / get_string / get_list, or parsed from fields_toml.
 */
#ifndef ASSAY_PLUGIN_H
#define ASSAY_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ASSAY_PLUGIN_ABI_VERSION 4u

/* kernel flags */
#define ASSAY_KERNEL_NONDETERMINISTIC 1u /* outputs may differ bitwise between runs (atomics, split-K) */
/* Relations the kernel satisfies (`assay verify --relations`; any ABI version: older libraries
 * leave these bits 0). Related runs call can_implement and launch again on derived cases. */
#define ASSAY_KERNEL_REL_BATCH 2u         /* a sequence's outputs do not depend on the rest of its batch */
#define ASSAY_KERNEL_REL_CONTINUATION 4u  /* T1 then T2 tokens with the state handed over = T1 + T2 */
#define ASSAY_KERNEL_REL_VARLEN 8u        /* a packed case = every sequence run as a dense case */
#define ASSAY_KERNEL_BATCH_INVARIANT 16u  /* the batch relation holds bit for bit */

typedef struct assay_tensor {
  const char* name;     /* the golden's tensor name, e.g. "x", "out" */
  const char* dtype;    /* canonical dtype name */
  int32_t rank;
  const int64_t* shape; /* rank entries */
  const char* const* axes; /* rank axis letters, e.g. {"B","T","D"} */
  int64_t numel;
  int64_t elem_bytes;   /* storage bytes per element */
  void* data;           /* device pointer (NULL in can_implement) */
} assay_tensor;

typedef struct assay_case {
  const char* op;         /* op stem, e.g. "scaled_add" */
  const char* case_name;  /* e.g. "int_exact" */
  const char* case_toml;  /* the case's verbatim TOML text */
  int32_t n_inputs;
  const assay_tensor* inputs;  /* sorted by name */
  int32_t n_outputs;
  const assay_tensor* outputs; /* sorted by name */
  /* Case numbers: return 1 and set *out if the case has field `key` and it is a number (get_int:
   * an integer; bools read as 0 / 1), else 0. */
  int (*get_double)(const struct assay_case* c, const char* key, double* out);
  int (*get_int)(const struct assay_case* c, const char* key, int64_t* out);
  void* host; /* assay's private data; do not touch */
  /* Version 3 (read these only from a library that declares abi_version 3): */
  const char* fields_toml; /* every resolved field, one "key = value" TOML line each, sorted */
  /* A string field: 1 and *out (valid until the next call on this case), else 0. */
  int (*get_string)(const struct assay_case* c, const char* key, const char** out);
  /* An array of numbers (or one number): 1, *values (valid until the next call) and *n, else 0. */
  int (*get_list)(const struct assay_case* c, const char* key, const double** values, int64_t* n);
  /* Version 4: see above (sorted by name in can_implement; the kernel's order in launch). */
  int32_t n_intermediates;
  const assay_tensor* intermediates;
} assay_case;

typedef struct assay_kernel {
  const char* op;    /* which goldens it runs on */
  const char* name;  /* unique, e.g. "mylib_scaled_add_v2" */
  const char* description;
  uint32_t flags;    /* ASSAY_KERNEL_* */
  int (*can_implement)(const assay_case* c, char* reason, size_t reason_len);
  int (*launch)(const assay_case* c, void* stream, char* err, size_t err_len);
  const char* precision_profile; /* v2+: NULL or "strict", or a profile of the op (see above) */
  const char* const* intermediates; /* v4: names of golden intermediates it writes, or NULL */
  int32_t n_intermediates;          /* v4 */
} assay_kernel;

typedef struct assay_plugin {
  uint32_t abi_version; /* ASSAY_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(assay_plugin) */
  const char* plugin_name;
  int32_t n_kernels;
  const assay_kernel* kernels;
} assay_plugin;

typedef const assay_plugin* (*assay_plugin_entry_fn)(void);
#define ASSAY_PLUGIN_ENTRY_SYMBOL "assay_plugin_entry"

#ifdef __cplusplus
}
#endif

#endif /* ASSAY_PLUGIN_H */
