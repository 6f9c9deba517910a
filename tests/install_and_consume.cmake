# Installs the build tree into a scratch prefix, then builds and runs tests/consumer
# against that prefix only (CMAKE_PREFIX_PATH), failing on any error.
file(REMOVE_RECURSE ${EMBER_SCRATCH})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_and_consume: command failed (${rc}): ${ARGN}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${EMBER_BUILD_DIR} --prefix ${EMBER_SCRATCH}/prefix)
run(${CMAKE_COMMAND} -S ${EMBER_CONSUMER_SRC} -B ${EMBER_SCRATCH}/build
    -DCMAKE_PREFIX_PATH=${EMBER_SCRATCH}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${EMBER_SCRATCH}/build)
run(${EMBER_SCRATCH}/build/consumer ${EMBER_SCRATCH}/consumer.h5)
