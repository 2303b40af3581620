# Compiles each header, public or detail, alone (-fsyntax-only): none may rely on what another
# includes first. EXTRA: further flags (the Eigen include folder, for fixed/eigen.hpp).
foreach(h IN LISTS HEADERS)
  execute_process(
    COMMAND ${COMPILER} -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror
            -I${ROOT}/include -I${ROOT}/detail ${EXTRA} -x c++ -include ${h} /dev/null
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${COMPILER}: ${h} does not compile on its own:\n${err}")
  endif()
endforeach()
