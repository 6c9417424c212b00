# Every ASSAY_* option, validated and echoed.
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
endif()

# RelWithDebInfo keeps line tables only (-g1): backtraces, sanitizers and profilers still name
# file:line, and a build compiles about a quarter faster than with full -g (verify/cli/cmd_gen.cpp:
# 23.0 s -> 17.1 s on the 2-core CI machine). ASSAY_FULL_DEBUG_INFO=ON (or a Debug build) keeps -g.
option(ASSAY_FULL_DEBUG_INFO "RelWithDebInfo with full debug info (-g) instead of line tables (-g1)" OFF)
if(NOT ASSAY_FULL_DEBUG_INFO)
  add_compile_options($<$<AND:$<CONFIG:RelWithDebInfo>,$<COMPILE_LANGUAGE:CXX,C>>:-g1>)
endif()

# Oracles must be reproducible: no FMA contraction, no fast-math (docs/DESIGN.md, numerics).
# Where a GPU kernel uses FMA, the oracle emulates it with an explicit std::fma.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>
                    $<$<COMPILE_LANGUAGE:CXX>:-fno-fast-math>
                    $<$<COMPILE_LANGUAGE:CXX>:-Wall> $<$<COMPILE_LANGUAGE:CXX>:-Wextra>)

set(ASSAY_ENABLE_CUDA "AUTO" CACHE STRING "Build CUDA kernels: AUTO (if nvcc is found), ON, OFF")
set_property(CACHE ASSAY_ENABLE_CUDA PROPERTY STRINGS AUTO ON OFF)
set(ASSAY_CUDA_ARCHS "90a" CACHE STRING "CUDA architectures for kernels (CMAKE_CUDA_ARCHITECTURES syntax)")
set(ASSAY_TEST_LEVEL "L0" CACHE STRING "Highest fixture level the test suite runs: L0, L1, L2")
set_property(CACHE ASSAY_TEST_LEVEL PROPERTY STRINGS L0 L1 L2)
if(NOT ASSAY_TEST_LEVEL MATCHES "^L[012]$")
  message(FATAL_ERROR "ASSAY_TEST_LEVEL must be L0, L1 or L2 (got '${ASSAY_TEST_LEVEL}')")
endif()

# Developer option: build only these oracle folders / fixture bindings (empty = all).
set(ASSAY_ONLY "" CACHE STRING "Build only these ops (reference/<name>/, fixtures/<name>.cpp); empty = all")
if(ASSAY_ONLY)
  message(STATUS "assay: building only ${ASSAY_ONLY}")
endif()

set(ASSAY_CUDA OFF)
if(NOT ASSAY_ENABLE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES "${ASSAY_CUDA_ARCHS}")
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(ASSAY_CUDA ON)
  elseif(ASSAY_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ASSAY_ENABLE_CUDA=ON but nvcc was not found")
  endif()
endif()

if(ASSAY_CUDA)
  message(STATUS "assay: [x] CUDA kernels (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "assay: [ ] nvcc not found or disabled: building oracles and CPU tests only")
endif()
message(STATUS "assay: test level ${ASSAY_TEST_LEVEL}, build type ${CMAKE_BUILD_TYPE}")
