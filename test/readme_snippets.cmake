# Compiles every ```cpp block of README.md, so the examples a reader copies stay true.
#
# A block that defines `int main(` is a whole program: it is compiled, linked and run as
# `program -o DIR` (an AOT generator writes its NAME.c and NAME.h there). A ```c block is the C side
# of the last such generator: it is compiled with the C sources the generator wrote, against its
# header, and run. Any other ```cpp block is a fragment: its `#include`,
# `using namespace` and `namespace x = ...` lines go to file scope, the rest becomes the body of
# main(), and the program is compiled, linked against the runtime library and run. A fragment with
# no #include of its own continues the README's context: it gets `#include <metagrad/metagrad.hpp>`
# and `using namespace metagrad;`.
#
# Arguments: ROOT (source tree), COMPILER, C_COMPILER, LIBRARY (libmetagrad), WORK (scratch directory),
# FLAGS (extra compile and link flags, a ;-list, e.g. the sanitizers').
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
# One list element per line; the characters CMake's lists treat specially are encoded and restored
# when a snippet is written.
file(READ ${ROOT}/README.md content)
string(REPLACE ";" "@SEMI@" content "${content}")
string(REPLACE "[" "@LB@" content "${content}")
string(REPLACE "]" "@RB@" content "${content}")
string(REPLACE "\n" ";" lines "${content}")
get_filename_component(libdir ${LIBRARY} DIRECTORY)

set(in_block FALSE)
set(count 0)
set(generated "")
set(failures "")
function(check_snippet index first_line body)
  set(top "")
  set(main_body "")
  set(has_include FALSE)
  set(has_main FALSE)
  foreach(line IN LISTS body)
    if(line MATCHES "int main\\(")
      set(has_main TRUE)
    endif()
  endforeach()
  if(has_main)
    string(JOIN "\n" source ${body})
  else()
    foreach(line IN LISTS body)
      if(line MATCHES "^#include")
        set(has_include TRUE)
        string(APPEND top "${line}\n")
      elseif(line MATCHES "^(using namespace |namespace [A-Za-z_]+ = )")
        string(APPEND top "${line}\n")
      else()
        string(APPEND main_body "  ${line}\n")
      endif()
    endforeach()
    if(NOT has_include)
      set(top "#include <metagrad/metagrad.hpp>\nusing namespace metagrad;\n${top}")
    endif()
    set(source "${top}\nint main() {\n${main_body}  return 0;\n}")
  endif()
  string(REPLACE "@SEMI@" ";" source "${source}")
  string(REPLACE "@LB@" "[" source "${source}")
  string(REPLACE "@RB@" "]" source "${source}")
  set(file ${WORK}/snippet${index}.cpp)
  file(WRITE ${file} "// README.md, the ```cpp block at line ${first_line}\n${source}\n")
  execute_process(
    COMMAND ${COMPILER} -std=c++20 -O0 -Wall -Wextra -Werror -Wno-unused-variable -Wno-unused-but-set-variable
            ${FLAGS} -I${ROOT}/include -I${ROOT}/detail ${file} -o ${WORK}/snippet${index}
            ${LIBRARY} -Wl,-rpath,${libdir} -pthread
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    set(failures "${failures}\nREADME.md:${first_line}: the block does not compile (${file}):\n${out}" PARENT_SCOPE)
    return()
  endif()
  set(args "")
  if(has_main)
    set(args -o ${WORK}/snippet${index}.out)
    set(generated ${WORK}/snippet${index}.out PARENT_SCOPE)
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env METAGRAD_CACHE=${WORK}/cache ${WORK}/snippet${index} ${args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    set(failures "${failures}\nREADME.md:${first_line}: the block compiles but fails when run (${rc}):\n${out}"
        PARENT_SCOPE)
  endif()
endfunction()

# A ```c block: the caller of the last generator's library.
function(check_c_snippet index first_line body)
  string(JOIN "\n" source ${body})
  string(REPLACE "@SEMI@" ";" source "${source}")
  string(REPLACE "@LB@" "[" source "${source}")
  string(REPLACE "@RB@" "]" source "${source}")
  set(file ${WORK}/snippet${index}.c)
  file(WRITE ${file} "/* README.md, the ```c block at line ${first_line} */\n${source}\n")
  file(GLOB sources ${generated}/*.c)
  if(NOT generated OR NOT sources)
    set(failures "${failures}\nREADME.md:${first_line}: a ```c block with no AOT generator before it" PARENT_SCOPE)
    return()
  endif()
  execute_process(
    COMMAND ${C_COMPILER} -std=c99 -O1 -Wall -Wextra -Werror -I${generated} ${file} ${sources} -lm
            -o ${WORK}/snippet${index}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    set(failures "${failures}\nREADME.md:${first_line}: the block does not compile with ${sources}:\n${out}"
        PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND ${WORK}/snippet${index} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    set(failures "${failures}\nREADME.md:${first_line}: the block compiles but fails when run (${rc}):\n${out}"
        PARENT_SCOPE)
  endif()
endfunction()

set(line_no 0)
foreach(line IN LISTS lines)
  math(EXPR line_no "${line_no} + 1")
  if(NOT in_block AND (line STREQUAL "```cpp" OR line STREQUAL "```c"))
    set(in_block TRUE)
    set(block_lang ${line})
    set(block "")
    set(block_line ${line_no})
  elseif(in_block AND line STREQUAL "```")
    set(in_block FALSE)
    math(EXPR count "${count} + 1")
    if(block_lang STREQUAL "```c")
      check_c_snippet(${count} ${block_line} "${block}")
    else()
      check_snippet(${count} ${block_line} "${block}")
    endif()
  elseif(in_block)
    list(APPEND block "${line}")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "README.md has no ```cpp or ```c block: the extraction is broken")
endif()
if(failures)
  message(FATAL_ERROR "${failures}")
endif()
message(STATUS "README.md: ${count} C and C++ blocks compile and run")
