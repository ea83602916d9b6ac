# ctest script: `placec compile --target=cuda` a run, then configure and BUILD (never run) the
# generated project against this build tree's placert_cuda. Inputs: PLACEC, SOURCE, RUN, WORK,
# PLACERT_CUDA_DIR.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${PLACEC} compile ${SOURCE} --run ${RUN} -o ${WORK}/src --target=cuda
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "placec compile --target=cuda failed (${result})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK}/src -B ${WORK}/build
  -Dplacert_cuda_DIR=${PLACERT_CUDA_DIR} RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configuring the generated project failed (${result})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "building the generated project failed (${result})")
endif()
if(NOT EXISTS ${WORK}/build/${RUN})
  message(FATAL_ERROR "the generated project built no ${RUN} executable")
endif()
