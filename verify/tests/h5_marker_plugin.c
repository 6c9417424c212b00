/* A stand-in for an HDF5 filter plugin that a hostile candidate wants loaded: loading this shared
   library (dlopen runs its constructor) creates the file named by $ASSAY_TEST_PLUGIN_MARKER. The
   hostile-input test puts it on $HDF5_PLUGIN_PATH and checks that assay never loads it. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void assay_test_marker(void) {
  const char* p = getenv("ASSAY_TEST_PLUGIN_MARKER");
  if (p) {
    FILE* f = fopen(p, "w");
    if (f) {
      fputs("loaded\n", f);
      fclose(f);
    }
  }
}

/* What HDF5 looks up after dlopen: a filter plugin. */
int H5PLget_plugin_type(void) { return 0; /* H5PL_TYPE_FILTER */ }
const void* H5PLget_plugin_info(void) { return NULL; }
