# Configures and builds a sanitizer build of this tree in BINARY (cmake -P, run by a ctest fixture;
# see test/CMakeLists.txt): SANITIZE is METAGRAD_SANITIZE's value, TARGETS what to build. Only the
# runtime library and the test programs are built; LLVM, OpenCL, examples and benchmarks are left
# out, and -O1 keeps the build short while the sanitizers stay exact.
foreach(var SOURCE BINARY SANITIZE TARGETS GENERATOR CXX_COMPILER C_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "sanitize_build.cmake: ${var} is not set")
  endif()
endforeach()
set(args -S ${SOURCE} -B ${BINARY} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_C_FLAGS_RELEASE=-O1
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_C_COMPILER=${C_COMPILER}
    -DMETAGRAD_SANITIZE=${SANITIZE} -DMETAGRAD_BUILD_TESTS=ON -DMETAGRAD_BUILD_EXAMPLES=OFF
    -DMETAGRAD_BUILD_BENCH=OFF -DMETAGRAD_SANITIZER_TESTS=OFF
    -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON -DCMAKE_DISABLE_FIND_PACKAGE_OpenCL=ON)
if(LAUNCHER)
  list(APPEND args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER} -DCMAKE_C_COMPILER_LAUNCHER=${LAUNCHER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the ${SANITIZE} build in ${BINARY} failed:\n${out}")
endif()
string(REPLACE "," ";" TARGETS "${TARGETS}")
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY} --target ${TARGETS} -j ${JOBS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  string(LENGTH "${out}" n)
  if(n GREATER 20000)  # the end says what failed
    math(EXPR from "${n} - 20000")
    string(SUBSTRING "${out}" ${from} -1 out)
  endif()
  message(FATAL_ERROR "building the ${SANITIZE} build in ${BINARY} failed:\n${out}")
endif()
message(STATUS "${SANITIZE} build ready in ${BINARY}")
