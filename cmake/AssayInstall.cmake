# `cmake --install build --prefix P` installs the oracle libraries, the golden reader and their
# headers as a CMake package, so another project's tests can do
#   find_package(assay REQUIRED)
#   target_link_libraries(my_test PRIVATE assay::assay_verify assay::assay_ref_ssd)
# and call an oracle or read a golden (examples/cmake_consumer is such a project; the ctest test
# package.consumer builds it against a fresh install).
#
# Installed: assay_core (dtype codecs, tensors), assay_ref_<op> (the oracles), assay_gen (portable
# RNG, case files, input builder), assay_verify (= assay_golden_io: HDF5 golden I/O and staleness,
# + assay_judge: candidate files, tolerance policy, compare), headers under include/assay/{reference,fixtures/gen,verify}/ with the same
# relative paths as in this tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_assay_oracles GLOBAL PROPERTY ASSAY_ORACLE_LIBS)
set(_assay_libs assay_core assay_gen assay_golden_io assay_judge ${_assay_oracles})
foreach(_t IN LISTS _assay_libs)
  target_include_directories(${_t} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/assay>)
endforeach()

install(TARGETS ${_assay_libs} assay_verify assay_thirdparty assay_fmt assay_hdf5 EXPORT assayTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/reference/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/assay/reference
        FILES_MATCHING PATTERN "*.h" PATTERN "tests" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/fixtures/gen/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/assay/fixtures/gen
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_SOURCE_DIR}/verify/io/golden.h ${PROJECT_SOURCE_DIR}/verify/io/h5.h ${PROJECT_SOURCE_DIR}/verify/io/stale.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/assay/verify/io)
install(FILES ${PROJECT_SOURCE_DIR}/verify/judge/candidate.h ${PROJECT_SOURCE_DIR}/verify/judge/compare.h
              ${PROJECT_SOURCE_DIR}/verify/judge/tolerance.h ${PROJECT_SOURCE_DIR}/verify/judge/verdict.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/assay/verify/judge)
install(EXPORT assayTargets NAMESPACE assay:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/assay)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/assayConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/assayConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/assay)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/assayConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/assayConfig.cmake ${PROJECT_BINARY_DIR}/assayConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/assay)

# The consumer project, built against a fresh install in the build tree (CPU, seconds).
add_test(NAME package.consumer
         COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR} -DSRC=${PROJECT_SOURCE_DIR}
                 -DWORK=${PROJECT_BINARY_DIR}/package-consumer -P ${PROJECT_SOURCE_DIR}/cmake/ConsumerTest.cmake)
set_tests_properties(package.consumer PROPERTIES LABELS "cpu;L0" TIMEOUT 900)

# The tool itself, relocatable: bin/assay finds its data as <exe>/../share/assay/{fixtures,golden}
# (verify/cli/main.cpp, fixtures_for / default_golden_dir), the plugins under lib/assay/, the plugin
# ABI header beside the other headers. `cpack -G DEB` (from the build directory) packs the same tree
# for Debian 12.
install(TARGETS assay RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(_p assay_example_plugin assay_mutants)
  if(TARGET ${_p})
    install(TARGETS ${_p} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/assay)
  endif()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/kernels/plugin/assay_plugin.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/assay/kernels/plugin)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/fixtures/ DESTINATION ${CMAKE_INSTALL_DATADIR}/assay/fixtures
        FILES_MATCHING PATTERN "*.toml" PATTERN "gen" EXCLUDE PATTERN "tests" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/golden/ DESTINATION ${CMAKE_INSTALL_DATADIR}/assay/golden
        FILES_MATCHING PATTERN "*.h5" PATTERN "MANIFEST" PATTERN "SCHEMA.md")

set(CPACK_PACKAGE_NAME assay)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "assay maintainers <assay@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Reference oracles, goldens and a differential correctness gate for GPU kernels")
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
# Debian 12 names of what bin/assay links (libhdf5_serial.so.103, libgomp; the CUDA runtime is static).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libhdf5-103-1, libgomp1, libstdc++6, libc6")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # assay_<version>_amd64.deb
set(CPACK_STRIP_FILES ON)                # the binary without its debug info
set(CPACK_GENERATOR DEB)
include(CPack)

# Install to a temporary prefix, move it, and run the moved copy from an unrelated directory: it
# must find its own fixtures and goldens (cmake/InstallTest.cmake).
add_test(NAME package.install
         COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR} -DSRC=${PROJECT_SOURCE_DIR}
                 -DWORK=${PROJECT_BINARY_DIR}/package-install -P ${PROJECT_SOURCE_DIR}/cmake/InstallTest.cmake)
set_tests_properties(package.install PROPERTIES LABELS "cpu;L0" TIMEOUT 900)
