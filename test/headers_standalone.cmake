# Compiles each header, public or detail, alone (-fsyntax-only): none may rely on what another
# includes first. MODE=together: all of them in one unit instead (one compiler's warnings and
# template checks over every header, at the cost of one). EXTRA: further flags (the Eigen include
# folder, for fixed/eigen.hpp).
set(flags -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -I${ROOT}/include -I${ROOT}/detail ${EXTRA})
if(MODE STREQUAL "together")
  set(includes "")
  foreach(h IN LISTS HEADERS)
    list(APPEND includes -include ${h})
  endforeach()
  execute_process(COMMAND ${COMPILER} ${flags} -x c++ ${includes} /dev/null RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${COMPILER}: the headers do not compile together:\n${err}")
  endif()
  return()
endif()
foreach(h IN LISTS HEADERS)
  execute_process(COMMAND ${COMPILER} ${flags} -x c++ -include ${h} /dev/null RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${COMPILER}: ${h} does not compile on its own:\n${err}")
  endif()
endforeach()
