# Builds metagrad, installs it to a fresh prefix, then configures, builds and runs a consumer
# project that only knows find_package(metagrad CONFIG REQUIRED).
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DMETAGRAD_BUILD_TESTS=OFF -DMETAGRAD_BUILD_BENCH=OFF -DMETAGRAD_BUILD_EXAMPLES=OFF)
run(${CMAKE_COMMAND} --build ${WORK}/build)
run(${CMAKE_COMMAND} --install ${WORK}/build --prefix ${WORK}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE}/test/consumer -B ${WORK}/consumer -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK}/prefix)
run(${CMAKE_COMMAND} --build ${WORK}/consumer)
run(${WORK}/consumer/consumer)
run(${WORK}/consumer/consumer_aot)
