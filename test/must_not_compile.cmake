# A must-not-compile case passes only if SOURCE fails to compile AND the compiler's output contains
# every `// expect: TEXT` line of SOURCE (the op's name and both shapes), so an unrelated error
# (a typo, a missing include) fails the test instead of passing it.
file(STRINGS ${SOURCE} expects REGEX "^// expect: ")
if(NOT expects)
  message(FATAL_ERROR "${SOURCE}: no `// expect:` line")
endif()
execute_process(
  COMMAND ${COMPILER} -std=c++20 -fsyntax-only -fdiagnostics-color=never -I${ROOT}/include -I${ROOT}/detail ${SOURCE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not")
endif()
foreach(line IN LISTS expects)
  string(REPLACE "// expect: " "" text "${line}")
  string(FIND "${out}${err}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${SOURCE}: the compiler's message lacks `${text}`:\n${err}")
  endif()
endforeach()
