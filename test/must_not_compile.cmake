# A must-not-compile case passes only if SOURCE fails to compile AND the compiler's first `error:`
# line contains every `// expect: TEXT` line of SOURCE (the op's name and both shapes), and those of
# `// expect g++: ` or `// expect clang: ` for that compiler (each spells the shapes its own way), so
# an unrelated error (a typo, a missing include) or a generic first line fails the test. A
# `// at most N lines` line bounds the whole output (no follow-on errors).
file(STRINGS ${SOURCE} expects REGEX "^// expect: ")
if(NOT expects)
  message(FATAL_ERROR "${SOURCE}: no `// expect:` line")
endif()
if(COMPILER MATCHES "clang")
  file(STRINGS ${SOURCE} own REGEX "^// expect clang: ")
else()
  file(STRINGS ${SOURCE} own REGEX "^// expect g\\+\\+: ")
endif()
execute_process(
  COMMAND ${COMPILER} -std=c++20 -fsyntax-only -fdiagnostics-color=never -I${ROOT}/include -I${ROOT}/detail ${SOURCE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not")
endif()
string(REGEX MATCH "[^\n]*error:[^\n]*" first "${out}${err}")
foreach(line IN LISTS expects own)
  string(REGEX REPLACE "^// expect[^:]*: " "" text "${line}")
  string(FIND "${first}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${SOURCE}: the first error line lacks `${text}`:\n${first}\n\nAll of it:\n${err}")
  endif()
endforeach()
file(STRINGS ${SOURCE} limit REGEX "^// at most [0-9]+ lines")
if(limit)
  string(REGEX MATCH "[0-9]+" max "${limit}")
  string(REGEX MATCHALL "\n" newlines "${out}${err}")
  list(LENGTH newlines count)
  if(count GREATER max)
    message(FATAL_ERROR "${SOURCE}: ${count} lines of output, more than ${max}:\n${err}")
  endif()
endif()
