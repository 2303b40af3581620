# Runs a command that must fail, within LIMIT seconds, printing text that matches EXPECT: a
# distributed job whose rank stopped or died ends with an error instead of hanging.
# Arguments: COMMAND (arguments separated by |), EXPECT (a regex), LIMIT (seconds).
cmake_minimum_required(VERSION 3.20)
string(REPLACE "|" ";" command "${COMMAND}")
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${command} TIMEOUT ${LIMIT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP t1 "%s")
math(EXPR secs "${t1} - ${t0}")
message(STATUS "exit: ${rc} after ${secs} s\n${out}\n${err}")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job hung: still running after ${LIMIT} s")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job succeeded; it should have ended with an error")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match '${EXPECT}'")
endif()
