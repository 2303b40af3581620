# bench/plot on the sample tables in test/plot/ (test/plot/check.py). Skipped, saying so, where
# Debian's python3-matplotlib is missing: the plot is a tool, not a dependency of the build.
# Argument: ROOT (source tree).
cmake_minimum_required(VERSION 3.20)
set(python /usr/bin/python3)
if(NOT EXISTS ${python})
  message("skipped: no ${python}")
  return()
endif()
execute_process(COMMAND ${python} -c "import matplotlib" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message("skipped: python3-matplotlib is not installed (apt-get install python3-matplotlib)")
  return()
endif()
execute_process(COMMAND ${python} ${ROOT}/test/plot/check.py ${ROOT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench/plot failed its check")
endif()
