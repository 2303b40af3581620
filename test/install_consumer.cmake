# Installs this build of metagrad to a fresh prefix, then builds and runs consumers that know only
# the installed package: a CMake project (find_package(metagrad CONFIG REQUIRED), test/consumer/) and
# plain compiler command lines with the flags from pkg-config (metagrad.pc). The build under test is
# installed, not a second one built here: that cost minutes of the test command and tested nothing more.
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE}/test/consumer -B ${WORK}/consumer -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK}/prefix)
run(${CMAKE_COMMAND} --build ${WORK}/consumer)
run(${WORK}/consumer/consumer)
run(${WORK}/consumer/consumer_headers)
run(${WORK}/consumer/consumer_aot)

# pkg-config: metagrad.pc in <libdir>/pkgconfig, relocatable (it finds the prefix from its own place).
find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
file(GLOB_RECURSE pc ${WORK}/prefix/*/pkgconfig/metagrad.pc)
if(NOT pc)
  message(FATAL_ERROR "metagrad.pc was not installed under ${WORK}/prefix")
endif()
get_filename_component(pcdir ${pc} DIRECTORY)
function(pkg out)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pcdir} ${PKG_CONFIG} ${ARGN} metagrad
                  RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} metagrad failed:\n${err}")
  endif()
  separate_arguments(text UNIX_COMMAND "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
pkg(version --modversion)
pkg(cflags --cflags)
pkg(libs --libs)
set(cxx $ENV{CXX})
if(NOT cxx)
  set(cxx c++)
endif()
run(${cxx} -std=c++20 ${cflags} ${SOURCE}/test/consumer/main.cpp -o ${WORK}/pc_consumer ${libs}
    "-DEXPECTED_VERSION=\"${version}\"")
# The runtime library's directory, from the -L flag pkg-config gave.
list(FILTER libs INCLUDE REGEX "^-L")
list(TRANSFORM libs REPLACE "^-L" "")
run(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${libs} ${WORK}/pc_consumer)
run(${cxx} -std=c++20 ${cflags} ${SOURCE}/test/consumer/headers_only.cpp -o ${WORK}/pc_consumer_headers)
run(${WORK}/pc_consumer_headers)
