# assay_add_oracle(<op> SOURCES <files...> [TESTS <files...>] [LABELS <labels...>])
#
# One call per op, in reference/<op>/CMakeLists.txt. Builds the oracle library assay_ref_<op>
# (linked into the assay CLI through fixtures/) and, if TESTS are given, the Catch2 executable
# test_<op>, whose test cases become CTest tests named "<op>.<test case>" with labels cpu;L0
# plus any LABELS given.
function(assay_add_oracle op)
  cmake_parse_arguments(A "" "" "SOURCES;TESTS;LABELS" ${ARGN})
  add_library(assay_ref_${op} STATIC ${A_SOURCES})
  target_include_directories(assay_ref_${op} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_link_libraries(assay_ref_${op} PUBLIC assay_core)
  set_property(GLOBAL APPEND PROPERTY ASSAY_ORACLE_LIBS assay_ref_${op})
  if(A_TESTS)
    assay_add_catch_test(test_${op} SOURCES ${A_TESTS} LINK assay_ref_${op} PREFIX "${op}." LABELS ${A_LABELS})
  endif()
endfunction()

# assay_add_catch_test(<exe> SOURCES <files...> LINK <libs...> PREFIX <p> [LABELS <labels...>])
function(assay_add_catch_test exe)
  cmake_parse_arguments(A "" "PREFIX" "SOURCES;LINK;LABELS" ${ARGN})
  add_executable(${exe} ${A_SOURCES})
  target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/cmake ${PROJECT_SOURCE_DIR})
  target_link_libraries(${exe} PRIVATE ${A_LINK} ${ASSAY_CATCH2_MAIN})
  # Test code (assertions and drivers; the code under test is in the libraries, built as
  # configured) at -O1: its -O2 code generation was two thirds of a test file's compile time.
  # The headers every test parses (Catch2, json, fmt, the standard library) come precompiled,
  # once for all tests (assay_test_pch, cmake/AssayDeps.cmake).
  target_compile_options(${exe} PRIVATE ${ASSAY_TEST_CXX_FLAGS})
  if(TARGET assay_test_pch)
    target_precompile_headers(${exe} REUSE_FROM assay_test_pch)
  endif()
  target_compile_definitions(${exe} PRIVATE ASSAY_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                             ASSAY_BINARY_DIR="${PROJECT_BINARY_DIR}")
  # --warn NoTests: a CTest test whose filter matches no test case fails instead of passing empty
  # (a test name with an unbalanced '[' once merged seven test cases into one filter that ran none).
  # OMP_WAIT_POLICY=passive: ctest -j runs several OpenMP processes at once, and libgomp's
  # spinning idle threads then starve the others (the whole CPU tier took 205 s instead of 72 s
  # on 2 cores).
  catch_discover_tests(${exe} TEST_PREFIX "${A_PREFIX}" EXTRA_ARGS --warn NoTests
                       PROPERTIES TIMEOUT 900 ENVIRONMENT "OMP_WAIT_POLICY=passive")
  # Labels (a list) cannot pass through catch_discover_tests' PROPERTIES: set them on the
  # discovered list <exe>_TESTS from an include file that CTest reads after discovery.
  set(_labels cpu L0 ${A_LABELS})
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${exe}_labels.cmake
       "if(${exe}_TESTS)\n  set_tests_properties(\${${exe}_TESTS} PROPERTIES LABELS \"${_labels}\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${CMAKE_CURRENT_BINARY_DIR}/${exe}_labels.cmake)
endfunction()

# assay_kernel_families(<out>): the kernel families, one per kernels/<op>/ folder that has a
# CMakeLists.txt (kernels/common, plugin, mutants and bench have none), sorted. CMake re-globs
# when a family is added.
function(assay_kernel_families out)
  file(GLOB _lists RELATIVE ${PROJECT_SOURCE_DIR}/kernels CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*/CMakeLists.txt)
  set(_ops)
  foreach(_l IN LISTS _lists)
    get_filename_component(_d ${_l} DIRECTORY)
    list(APPEND _ops ${_d})
  endforeach()
  list(SORT _ops)
  set(${out} ${_ops} PARENT_SCOPE)
endfunction()
