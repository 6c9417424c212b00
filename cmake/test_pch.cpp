// The donor of the tests' precompiled headers (ASSAY_TEST_PCH, cmake/AssayDeps.cmake): it only
// has to compile with the tests' flags. Its Catch2 session has no test cases.
