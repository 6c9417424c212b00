# ctest package.install: install this build into WORK/prefix, move the install to WORK/moved (it
# must be relocatable), and from an unrelated directory run the moved binary: gen --check of its
# installed goldens, calibrate --op scaled_add, python -m assay check --op scaled_add with a numpy
# kernel (the package from the source tree, the binary and goldens from the install), and compare of
# an installed golden against that check's candidate. Each must find the install's own fixtures and
# goldens (the reports name them). The Python step needs the project's .venv (scripts/setup).
file(REMOVE_RECURSE ${WORK})
set(PY ${SRC}/.venv/bin/python)
if(NOT EXISTS ${PY})
  message(FATAL_ERROR "package.install: no ${PY} for the Python step: run scripts/setup")
endif()
function(run_in dir)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=ASSAY_FIXTURES --unset=ASSAY_GOLDEN --unset=ASSAY_GOLDEN_DIR
                          ${ARGN}
                  WORKING_DIRECTORY ${dir} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package.install: `${ARGN}` (in ${dir}) failed (${rc}):\n${out}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
endfunction()
function(expect what)
  string(FIND "${OUT}" "${what}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "package.install: expected '${what}' in:\n${OUT}")
  endif()
endfunction()

run_in(${BUILD} ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
file(RENAME ${WORK}/prefix ${WORK}/moved)
set(M ${WORK}/moved)
set(A ${M}/bin/assay)
file(MAKE_DIRECTORY ${WORK}/elsewhere)
set(E ${WORK}/elsewhere)

run_in(${E} ${A} gen --check -q --op scaled_add)
expect("${M}/share/assay/golden")
run_in(${E} ${A} calibrate --op scaled_add --json-file ${E}/cal.json)
file(READ ${E}/cal.json cal)
string(FIND "${cal}" "\"ok\": true" ok)
if(ok EQUAL -1)
  message(FATAL_ERROR "package.install: calibrate --op scaled_add did not pass:\n${cal}")
endif()

file(WRITE ${WORK}/kmod/install_kernel.py [=[
import ml_dtypes
import numpy as np


def scaled_add(g):
    x, y = (g.inputs_f64[n] for n in ("x", "y"))
    out = g.case["alpha"] * x + g.case["beta"] * y
    return {"out": out.astype(ml_dtypes.bfloat16 if g.outputs["out"].dtype == "bf16" else
                              np.float16 if g.outputs["out"].dtype == "fp16" else np.float32)}
]=])
run_in(${E} ${CMAKE_COMMAND} -E env ASSAY_BIN=${A} PYTHONPATH=${SRC}/python:${WORK}/kmod
       ${PY} -m assay check --op scaled_add --impl install_kernel:scaled_add --out ${E}/check --no-html)
expect("Passed")
file(READ ${E}/check/scaled_add/report.json rep)
string(FIND "${rep}" "\"fixtures_dir\": \"${M}/share/assay/fixtures\"" used)
if(used EQUAL -1)
  message(FATAL_ERROR "package.install: python -m assay check did not judge with the install's fixtures:\n${rep}")
endif()
run_in(${E} ${A} compare ${M}/share/assay/golden/scaled_add/int_exact.h5 ${E}/check/scaled_add/candidates/int_exact.h5
       --json-file ${E}/cmp.json)
expect("Passed")
file(READ ${E}/cmp.json cmp)
string(FIND "${cmp}" "\"fixtures_dir\": \"${M}/share/assay/fixtures\"" used)
if(used EQUAL -1)
  message(FATAL_ERROR "package.install: compare did not judge with the install's fixtures:\n${cmp}")
endif()
message(STATUS "package.install: the moved install judged with ${M}/share/assay/{fixtures,golden}")
