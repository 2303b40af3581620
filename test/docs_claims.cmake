# The claims of README.md and docs/*.md that a script can check against the tree:
#  - every repository path they name exists (`device/gemm.hpp` may stand for the header under
#    include/metagrad/ or detail/metagrad/, `examples/gpt` for examples/gpt.cpp; placeholders with
#    `X`, `...` or a trailing `_` are patterns, not paths);
#  - every program they run as `build/bench/NAME` or `build/examples/NAME` is built by that folder;
#  - every environment variable the library reads is named in docs/environment.md;
#  - every element type in `dtypes::` is listed in docs/API.md.
# Argument: ROOT (source tree).
cmake_minimum_required(VERSION 3.20)
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
set(errors "")

file(GLOB docs ${ROOT}/docs/*.md)
list(PREPEND docs ${ROOT}/README.md)
foreach(doc IN LISTS docs)
  file(READ ${doc} text)
  file(RELATIVE_PATH name ${ROOT} ${doc})
  # Paths under the repository's top folders, not preceded by a path or word character.
  string(REGEX MATCHALL "(^|[^A-Za-z0-9_./+-])(include|detail|src|runtime|bench|examples|test|tools|docs|cmake)/[A-Za-z0-9_./+-]*[A-Za-z0-9_]"
         paths "${text}")
  foreach(p IN LISTS paths)
    string(REGEX REPLACE "^[^a-z]" "" p "${p}")
    if(p MATCHES "(\\.\\.\\.|X|_$)")
      continue()
    endif()
    set(found FALSE)
    foreach(candidate ${p} ${p}.cpp ${p}.hpp include/metagrad/${p} detail/metagrad/${p})
      if(EXISTS ${ROOT}/${candidate})
        set(found TRUE)
      endif()
    endforeach()
    if(NOT found)
      string(APPEND errors "\n${name}: names `${p}`, which is not in the repository")
    endif()
  endforeach()
  # Programs: a source file, a folder, or a target the folder's CMakeLists.txt makes.
  string(REGEX MATCHALL "build/(bench|examples)/[A-Za-z0-9_]+" programs "${text}")
  foreach(p IN LISTS programs)
    string(REGEX REPLACE "^build/([a-z]+)/(.*)$" "\\1;\\2" parts "${p}")
    list(GET parts 0 folder)
    list(GET parts 1 program)
    file(READ ${ROOT}/${folder}/CMakeLists.txt cmake_text)
    if(NOT EXISTS ${ROOT}/${folder}/${program}.cpp AND NOT IS_DIRECTORY ${ROOT}/${folder}/${program}
       AND NOT cmake_text MATCHES "[( ]${program}[ )]")
      string(APPEND errors "\n${name}: runs `${p}`, which ${folder}/CMakeLists.txt does not build")
    endif()
  endforeach()
endforeach()

# Environment variables the library reads by name.
file(READ ${ROOT}/docs/environment.md env_doc)
file(GLOB_RECURSE sources ${ROOT}/runtime/*.cpp ${ROOT}/runtime/*.hpp ${ROOT}/include/*.hpp ${ROOT}/detail/*.hpp)
set(read_vars "")
foreach(src IN LISTS sources)
  file(STRINGS ${src} lines REGEX "(getenv[a-z_]*|env)\\(\"[A-Z][A-Z0-9_]+\"")
  foreach(line IN LISTS lines)
    string(REGEX MATCHALL "(getenv[a-z_]*|env)\\(\"[A-Z][A-Z0-9_]+\"" calls "${line}")
    foreach(call IN LISTS calls)
      string(REGEX REPLACE ".*\\(\"([A-Z0-9_]+)\"" "\\1" var "${call}")
      list(APPEND read_vars ${var})
    endforeach()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES read_vars)
list(LENGTH read_vars count)
if(count LESS 5)
  string(APPEND errors "\nfound only ${count} environment variables read by the library: the pattern no longer matches how it reads them")
endif()
foreach(var IN LISTS read_vars)
  if(NOT env_doc MATCHES "`${var}[`=]")
    string(APPEND errors "\nthe library reads ${var}, which docs/environment.md does not name")
  endif()
endforeach()

# Element types.
file(READ ${ROOT}/docs/API.md api_doc)
file(STRINGS ${ROOT}/include/metagrad/helpers.hpp dtype_lines REGEX "^inline constexpr DType [a-z0-9_]+\\{")
foreach(line IN LISTS dtype_lines)
  string(REGEX REPLACE "^inline constexpr DType ([a-z0-9_]+)\\{.*" "\\1" dtype "${line}")
  if(NOT api_doc MATCHES "`dtypes::${dtype}`")
    string(APPEND errors "\nthe element type dtypes::${dtype} is not listed in docs/API.md")
  endif()
endforeach()
if(NOT dtype_lines)
  string(APPEND errors "\nno `inline constexpr DType` found in include/metagrad/helpers.hpp")
endif()

if(errors)
  message(FATAL_ERROR "docs claim what the tree does not hold:${errors}")
endif()
list(LENGTH docs ndocs)
list(LENGTH read_vars nvars)
list(LENGTH dtype_lines ndtypes)
message("docs claims hold: paths and programs of ${ndocs} files, ${nvars} environment variables, ${ndtypes} element types")
