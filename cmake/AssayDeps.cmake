# Dependencies: Debian packages only (scripts/setup installs them).
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(benchmark QUIET)

# Catch2: v2.13 from Debian here, v3 on the GPU machine. tests/catch_compat.h hides the difference.
find_package(Catch2 3 QUIET)
if(Catch2_FOUND)
  set(ASSAY_CATCH2_MAJOR 3)
  set(ASSAY_CATCH2_MAIN Catch2::Catch2WithMain)
else()
  find_package(Catch2 2 REQUIRED)
  set(ASSAY_CATCH2_MAJOR 2)
  add_library(assay_catch2_main STATIC ${PROJECT_SOURCE_DIR}/cmake/catch2_main.cpp)
  target_link_libraries(assay_catch2_main PUBLIC Catch2::Catch2)
  target_include_directories(assay_catch2_main PUBLIC ${PROJECT_SOURCE_DIR}/cmake)
  # Catch2's runner (the longest single compile of the build at -O2), not code under test.
  target_compile_options(assay_catch2_main PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O0>)
  set(ASSAY_CATCH2_MAIN assay_catch2_main)
endif()
include(Catch)

# HDF5 behind one imported target. fmt compiled in (assay_fmt) and header-only toml++ so that binaries built here link
# only libhdf5 and libgomp beyond the C++ runtime (they run on the GPU machine as they are).
add_library(assay_hdf5 INTERFACE)
target_include_directories(assay_hdf5 INTERFACE ${HDF5_INCLUDE_DIRS})
# Link libhdf5 alone (not its private deps: curl, crypto, sz), so binaries need only libhdf5.
if(HDF5_C_LIBRARY_hdf5)
  target_link_libraries(assay_hdf5 INTERFACE ${HDF5_C_LIBRARY_hdf5})
else()
  target_link_libraries(assay_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
endif()
target_compile_definitions(assay_hdf5 INTERFACE ${HDF5_DEFINITIONS})

# fmt: its headers (the header-only target's include directories, without its FMT_HEADER_ONLY)
# and its implementation compiled once, statically (cmake/fmt_impl.cpp).
add_library(assay_fmt STATIC ${PROJECT_SOURCE_DIR}/cmake/fmt_impl.cpp)
target_include_directories(assay_fmt SYSTEM PUBLIC
                           $<BUILD_INTERFACE:$<TARGET_PROPERTY:fmt::fmt-header-only,INTERFACE_INCLUDE_DIRECTORIES>>)
set_target_properties(assay_fmt PROPERTIES POSITION_INDEPENDENT_CODE ON)

add_library(assay_thirdparty INTERFACE)
target_link_libraries(assay_thirdparty INTERFACE assay_fmt nlohmann_json::nlohmann_json
                      CLI11::CLI11 Eigen3::Eigen OpenMP::OpenMP_CXX)

# OpenBLAS under Eigen's dense products (EIGEN_USE_BLAS): Debian's OpenMP build
# (libopenblas-openmp-dev), linked statically so binaries still need only libhdf5 and libgomp.
# Its threads are libgomp's: inside an oracle's `omp parallel` region a GEMM runs on the calling
# thread, outside it uses the whole OpenMP pool, and then its bits can depend on the thread count.
# So the oracles call their GEMMs inside their parallel regions (over batch, head, chunk or tile),
# and `gen --check` at 1 and N threads checks that results do not depend on the thread count.
# ASSAY_BLAS=OFF, or no OpenBLAS, falls back to Eigen's own GEMM.
option(ASSAY_BLAS "Use OpenBLAS (OpenMP build) under Eigen's products" ON)
set(ASSAY_BLAS_BACKEND "Eigen")
if(ASSAY_BLAS)
  set(_ob_dirs /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
  find_library(ASSAY_OPENBLAS_LIB NAMES libopenblas.a PATHS ${_ob_dirs} NO_DEFAULT_PATH)
  find_path(ASSAY_OPENBLAS_INCLUDE cblas.h
            PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
  if(ASSAY_OPENBLAS_LIB AND ASSAY_OPENBLAS_INCLUDE)
    set(ASSAY_BLAS_BACKEND "OpenBLAS (OpenMP, static)")
    # An imported static library whose own dependencies (libgomp, libm) follow it on every link line.
    add_library(assay_openblas STATIC IMPORTED)
    set_target_properties(assay_openblas PROPERTIES IMPORTED_LOCATION ${ASSAY_OPENBLAS_LIB}
                          INTERFACE_LINK_LIBRARIES "gomp;m;pthread")
    # Installed packages (cmake/AssayInstall.cmake) name the archive itself and libgomp: an
    # imported target does not travel with the export.
    target_link_libraries(assay_thirdparty INTERFACE $<BUILD_INTERFACE:assay_openblas>
                          $<INSTALL_INTERFACE:${ASSAY_OPENBLAS_LIB}> $<INSTALL_INTERFACE:gomp>)
    target_include_directories(assay_thirdparty SYSTEM INTERFACE ${ASSAY_OPENBLAS_INCLUDE})
    target_compile_definitions(assay_thirdparty INTERFACE $<$<COMPILE_LANGUAGE:CXX>:EIGEN_USE_BLAS>
                               $<$<COMPILE_LANGUAGE:CXX>:ASSAY_HAVE_OPENBLAS=1>)
  endif()
endif()
if(NOT ASSAY_BLAS_BACKEND STREQUAL _assay_blas_said)
  if(ASSAY_BLAS_BACKEND STREQUAL "Eigen")
    message(STATUS "assay: dense products use Eigen's own GEMM (no OpenBLAS: scripts/setup installs "
                   "libopenblas-openmp-dev; or ASSAY_BLAS=OFF)")
  else()
    message(STATUS "assay: dense products use ${ASSAY_BLAS_BACKEND}")
  endif()
  set(_assay_blas_said "${ASSAY_BLAS_BACKEND}" CACHE INTERNAL "")
endif()
target_compile_definitions(assay_thirdparty INTERFACE TOML_HEADER_ONLY=1 TOML_EXCEPTIONS=1)
get_target_property(_toml_inc tomlplusplus::tomlplusplus INTERFACE_INCLUDE_DIRECTORIES)
target_include_directories(assay_thirdparty INTERFACE ${_toml_inc})

# The tests' own flags (cmake/AssayAddOp.cmake) and their precompiled headers: the headers every
# test file parses, precompiled once in assay_test_pch (an executable like the tests, so with the
# same flags) and reused by every test executable. ASSAY_TEST_PCH=OFF parses them in each file.
set(ASSAY_TEST_CXX_FLAGS $<$<CONFIG:Release,RelWithDebInfo>:-O1>)
option(ASSAY_TEST_PCH "Precompile the headers every test file parses" ON)
if(ASSAY_TEST_PCH)
  add_executable(assay_test_pch ${PROJECT_SOURCE_DIR}/cmake/test_pch.cpp)
  target_include_directories(assay_test_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake ${PROJECT_SOURCE_DIR})
  target_link_libraries(assay_test_pch PRIVATE assay_thirdparty ${ASSAY_CATCH2_MAIN})
  target_compile_options(assay_test_pch PRIVATE ${ASSAY_TEST_CXX_FLAGS})
  target_precompile_headers(assay_test_pch PRIVATE
    "${PROJECT_SOURCE_DIR}/cmake/catch_compat.h" <nlohmann/json.hpp> <fmt/format.h>
    <algorithm> <cmath> <cstdint> <filesystem> <fstream> <functional> <iostream> <map> <memory>
    <optional> <set> <sstream> <string> <variant> <vector>)
endif()
