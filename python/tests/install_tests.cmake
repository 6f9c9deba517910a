# The Python package as users install it, then imported from there only by
# check_installed.py in a fresh interpreter (cwd the scratch directory, PYTHONPATH the
# install directory alone, or a venv). Offline: nothing is downloaded.
#   EMBER_MODE=cmake  cmake --install <build> --component python --prefix <scratch>/prefix
#   EMBER_MODE=pip    pip install --no-build-isolation . into a venv over the system's
#                     packages, reusing <build> (EMBER_BUILD_DIR) so that nothing is rebuilt
# Inputs: EMBER_MODE, EMBER_BUILD_DIR, EMBER_SOURCE_DIR, EMBER_SCRATCH, Python3_EXECUTABLE,
# EMBER_PYTHON_INSTALL_DIR (relative to the prefix).
file(REMOVE_RECURSE ${EMBER_SCRATCH})
file(MAKE_DIRECTORY ${EMBER_SCRATCH})
function(run)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${EMBER_SCRATCH} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "python install test: command failed (${rc}): ${ARGN}")
  endif()
endfunction()
set(check ${EMBER_SOURCE_DIR}/python/tests/check_installed.py)

if(EMBER_MODE STREQUAL "cmake")
  run(${CMAKE_COMMAND} --install ${EMBER_BUILD_DIR} --component python --prefix ${EMBER_SCRATCH}/prefix)
  if(EXISTS ${EMBER_SCRATCH}/prefix/include OR EXISTS ${EMBER_SCRATCH}/prefix/lib/cmake)
    message(FATAL_ERROR "python install test: the component python installed the C++ package too")
  endif()
  set(site ${EMBER_SCRATCH}/prefix/${EMBER_PYTHON_INSTALL_DIR})
  run(${CMAKE_COMMAND} -E env --unset=PYTHONHOME PYTHONPATH=${site} PYTHONNOUSERSITE=1
      PYTHONDONTWRITEBYTECODE=1 ${Python3_EXECUTABLE} ${check} ${site})
elseif(EMBER_MODE STREQUAL "pip")
  run(${Python3_EXECUTABLE} -m venv --system-site-packages ${EMBER_SCRATCH}/venv)
  run(${CMAKE_COMMAND} -E env --unset=PYTHONPATH EMBER_BUILD_DIR=${EMBER_BUILD_DIR}
      PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
      ${EMBER_SCRATCH}/venv/bin/python -m pip install --quiet --no-index --no-build-isolation
      ${EMBER_SOURCE_DIR})
  run(${CMAKE_COMMAND} -E env --unset=PYTHONPATH PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1
      ${EMBER_SCRATCH}/venv/bin/python ${check} ${EMBER_SCRATCH}/venv pip)
else()
  message(FATAL_ERROR "python install test: EMBER_MODE must be cmake or pip, got '${EMBER_MODE}'")
endif()
