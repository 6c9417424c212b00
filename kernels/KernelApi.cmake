# The kernel registry and plugin loader (kernels/registry.h, registry.cpp): plain host C++ that
# depends on reference/core only. Built in every configuration (CPU-only builds run the runner
# and report NotRun); the runner (verify/), the built-in kernels and the C++ plugin adapter link
# this one library.
add_library(assay_kernel_api STATIC ${CMAKE_CURRENT_LIST_DIR}/registry.cpp)
target_include_directories(assay_kernel_api PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
target_link_libraries(assay_kernel_api PUBLIC assay_core ${CMAKE_DL_LIBS})
