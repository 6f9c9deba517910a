# Runs make_dates into SCRATCH and checks each split equals the shipped one in DATA.
file(REMOVE_RECURSE ${SCRATCH})
file(MAKE_DIRECTORY ${SCRATCH})
execute_process(COMMAND ${MAKE_DATES} --out ${SCRATCH} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_dates failed (${rc})")
endif()
foreach(split train valid test)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${SCRATCH}/${split}.tsv ${DATA}/${split}.tsv
    RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "${split}.tsv written by make_dates differs from ${DATA}/${split}.tsv")
  endif()
endforeach()
