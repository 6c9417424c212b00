# ctest package.consumer: install this build into WORK/prefix, then configure, build and run
# examples/cmake_consumer against it. Any step failing fails the test with its output.
file(REMOVE_RECURSE ${WORK})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package.consumer: `${ARGN}` failed (${rc}):\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()
step(${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
step(${CMAKE_COMMAND} -S ${SRC}/examples/cmake_consumer -B ${WORK}/build -DCMAKE_PREFIX_PATH=${WORK}/prefix
     -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${WORK}/build)
step(${WORK}/build/consumer ${SRC}/golden/scaled_add/int_exact.h5)
