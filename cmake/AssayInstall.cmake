# `cmake --install build --prefix P` installs the oracle libraries, the golden reader and their
# headers as a CMake package, so another project's tests can do
#   find_package(assay REQUIRED)
#   target_link_libraries(my_test PRIVATE assay::assay_verify assay::assay_ref_ssd)
# and call an oracle or read a golden (examples/cmake_consumer is such a project; the ctest test
# package.consumer builds it against a fresh install).
#
# Installed: assay_core (dtype codecs, tensors), assay_ref_<op> (the oracles), assay_gen (portable
# RNG, case files, input builder), assay_verify (HDF5 golden and candidate I/O, tolerance policy,
# compare, staleness), headers under include/assay/{reference,fixtures/gen,verify}/ with the same
# relative paths as in this tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_assay_oracles GLOBAL PROPERTY ASSAY_ORACLE_LIBS)
set(_assay_libs assay_core assay_gen assay_verify ${_assay_oracles})
foreach(_t IN LISTS _assay_libs)
  target_include_directories(${_t} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/assay>)
endforeach()

install(TARGETS ${_assay_libs} assay_thirdparty assay_hdf5 EXPORT assayTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/reference/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/assay/reference
        FILES_MATCHING PATTERN "*.h" PATTERN "tests" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/fixtures/gen/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/assay/fixtures/gen
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_SOURCE_DIR}/verify/golden.h ${PROJECT_SOURCE_DIR}/verify/h5.h ${PROJECT_SOURCE_DIR}/verify/candidate.h
              ${PROJECT_SOURCE_DIR}/verify/compare.h ${PROJECT_SOURCE_DIR}/verify/tolerance.h
              ${PROJECT_SOURCE_DIR}/verify/stale.h ${PROJECT_SOURCE_DIR}/verify/verdict.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/assay/verify)
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
