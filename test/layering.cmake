# The layer table: which metagrad files may include which. Run with cmake -DROOT=<source dir> -P.
#
# Layers, lowest first. A file may include metagrad headers of its own layer and of layers below it,
# never above: codegen and the devices cannot see the lazy graph, the lazy graph cannot see Tensor.
#   helpers   helpers.hpp, version.hpp,               dtypes, env, small_vector, version macros, the
#             detail/{hlops,small_vector,format}.hpp  hlops both paths write once, values as text
#   shape     shape/                                  symbolic, View, ShapeTracker
#   ops       ops.hpp                                 the op vocabulary (enums, Op)
#   functions functions.hpp, fixed/math.hpp           the elementwise functions' one definition for
#                                                     both paths (FnTraits), and their scalar math
#   kernels   fixed/{gemm,simd,parallel,arena,cpu,shape}.hpp
#                                                     header-only CPU kernels both paths run: the GEMM
#   ast       ast.hpp                                 the kernel AST over buffer descriptors
#   runtime   device.hpp, runtime/{lib,buffer_pool,threadpool,disk_cache,gemm}.hpp
#                                                     Backend, Compiled, Interpreted, Device, RawBuffer,
#                                                     the GEMM compiled per ISA (runtime/gemm/)
#   codegen   codegen/                                Kernel, linearizer, renderers, pipeline
#   backends  runtime/{host_program,gemm_program,cuda_gemm,ops_*}.hpp
#                                                     the devices (CLANG, LLVM, OPENCL, CPU)
#   lazy      lazy.hpp (runtime/lazy, schedule, graph, realize_report.cpp)  LazyBuffer, the scheduler
#   mlops     mlops.hpp                               the differentiable ops
#   fixed     fixed.hpp, fixed/                       the static path: it may include only helpers,
#                                                     shape, ops, functions, kernels and itself
#   tensor    tensor.hpp, nn, jit, aot, lower.hpp, datasets, metagrad.hpp
#   dist      dist/ (runtime/dist/)                   data parallelism over MPI (metagrad::dist)
# Every include form counts ("metagrad/...", <metagrad/...>, quoted and relative to the file), in
# every file under include/, detail/ and runtime/; and no file may include itself through others.
# A detail header (detail/metagrad/detail/X) takes the layer of the public header metagrad/X whose
# internals it holds. Sources under runtime/ take the layer of what they implement, except
# runtime/mlops.cpp: the mlops compute on Tensors (tensor.hpp), as tinygrad's mlops.py imports
# tensor.Function. Every file must be in the table.
#
# Public headers hold what users name: a header under include/metagrad that opens a `namespace
# detail` fails (its internals go to detail/metagrad/detail/<same path>).
cmake_minimum_required(VERSION 3.20)

set(METAGRAD_LAYERS helpers shape ops functions kernels ast runtime codegen backends lazy mlops fixed tensor dist)

# Path (metagrad/... for headers, runtime/... for sources) -> layer, first match wins.
set(METAGRAD_LAYER_TABLE
  "^metagrad/(helpers|version|detail/hlops|detail/small_vector|detail/format)\\.hpp$=helpers"
  "^(metagrad|runtime)/shape/=shape"
  "^metagrad/ops\\.hpp$|^runtime/ops\\.cpp$=ops"
  "^metagrad/(functions|fixed/math)\\.hpp$=functions"
  "^metagrad/fixed/(arena|cpu|gemm|parallel|shape|simd)\\.hpp$=kernels"
  "^metagrad/ast\\.hpp$|^runtime/ast\\.cpp$=ast"
  "^metagrad/runtime/gemm\\.hpp$|^runtime/gemm/(dispatch|beam|sgemm_[a-z0-9]+)\\.cpp$|^runtime/gemm/sgemm_isa\\.inc$=runtime"
  "^metagrad/runtime/(gemm_program|cuda_gemm)\\.hpp$|^runtime/gemm/(program|cuda)\\.cpp$=backends"
  "^metagrad/runtime/(host_program|ops_[a-z]+)\\.hpp$=backends"
  "^runtime/(host_program|ops_[a-z]+|device_plugins|llvm_plugin)\\.cpp$=backends"
  "^metagrad/device\\.hpp$|^metagrad/runtime/(lib|buffer_pool|threadpool|disk_cache)\\.hpp$=runtime"
  "^runtime/(device|compiled|interpreted|lib|buffer_pool|threadpool|disk_cache)\\.cpp$=runtime"
  "^(metagrad|runtime)/codegen/=codegen"
  "^metagrad/lazy\\.hpp$|^runtime/(lazy|schedule|graph|realize_report)\\.cpp$|^runtime/plan\\.hpp$=lazy"
  "^metagrad/mlops\\.hpp$=mlops"
  "^metagrad/fixed(\\.hpp$|/)=fixed"
  "^metagrad/(tensor|nn|jit|aot|lower|metagrad)\\.hpp$|^metagrad/(nn|datasets)/=tensor"
  "^runtime/(tensor|nn|datasets)/|^runtime/(jit|aot|aot_gemm|mlops)\\.cpp$|^runtime/aot_gemm\\.hpp$=tensor"
  "^(metagrad|runtime)/dist/=dist")

function(layer_of path out)
  if(NOT path MATCHES "^metagrad/detail/(hlops|small_vector|format)\\.hpp$")
    if(path MATCHES "^metagrad/detail/(.+)$")
      set(path "metagrad/${CMAKE_MATCH_1}")  # a detail header: its public header's layer
    endif()
  endif()
  foreach(entry IN LISTS METAGRAD_LAYER_TABLE)
    string(FIND "${entry}" "=" eq REVERSE)
    string(SUBSTRING "${entry}" 0 ${eq} pattern)
    math(EXPR after "${eq} + 1")
    string(SUBSTRING "${entry}" ${after} -1 layer)
    if(path MATCHES "${pattern}")
      set(${out} ${layer} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# layer_of, reporting a path the table does not name (`context` says where it came from).
function(checked_layer path context out)
  layer_of("${path}" layer)
  if(layer STREQUAL "")
    set(errors "${errors}\n  ${context}${path}: not in the layer table (test/layering.cmake)" PARENT_SCOPE)
  endif()
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

function(rank_of layer out)
  list(FIND METAGRAD_LAYERS ${layer} r)
  set(${out} ${r} PARENT_SCOPE)
endfunction()

set(errors "")
file(GLOB_RECURSE headers RELATIVE ${ROOT}/include ${ROOT}/include/metagrad/*.hpp)
file(GLOB_RECURSE details RELATIVE ${ROOT}/detail ${ROOT}/detail/metagrad/*.hpp)
# Every source and header under runtime/ (.cpp, .hpp, .inc), not only the sources.
file(GLOB_RECURSE sources RELATIVE ${ROOT} ${ROOT}/runtime/*.cpp ${ROOT}/runtime/*.hpp ${ROOT}/runtime/*.inc)
# name|path: names as includes spell them (metagrad/...) or as sources sit (runtime/...).
set(files "")
foreach(dir_names IN ITEMS "include:headers" "detail:details" ".:sources")
  string(REPLACE ":" ";" dn "${dir_names}")
  list(GET dn 0 dir)
  list(GET dn 1 names)
  foreach(n IN LISTS ${names})
    list(APPEND files "${n}|${ROOT}/${dir}/${n}")
  endforeach()
endforeach()

foreach(f IN LISTS files)
  string(REPLACE "|" ";" parts "${f}")
  list(GET parts 0 name)
  list(GET parts 1 path)
  checked_layer("${name}" "" layer)
  if(layer STREQUAL "")
    continue()
  endif()
  rank_of(${layer} rank)
  # Every include form: "metagrad/..." and <metagrad/...>, and a quoted include relative to the
  # including file (runtime/schedule.cpp's "plan.hpp" is runtime/plan.hpp).
  file(STRINGS "${path}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+(\"[^\"]+\"|<metagrad/[^>]+>)")
  get_filename_component(dir "${name}" DIRECTORY)
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[^\"<]*[\"<]([^\">]+)[\">].*$" "\\1" target "${line}")
    if(NOT target MATCHES "^metagrad/")
      if(NOT EXISTS "${ROOT}/${dir}/${target}" AND NOT EXISTS "${ROOT}/include/${dir}/${target}"
         AND NOT EXISTS "${ROOT}/detail/${dir}/${target}")
        continue()  # not a metagrad file (a test's own helper, a system header in quotes)
      endif()
      set(target "${dir}/${target}")
    endif()
    checked_layer("${target}" "${name} includes " tlayer)
    if(tlayer STREQUAL "")
      continue()
    endif()
    string(MAKE_C_IDENTIFIER "${name}" id)
    list(APPEND edges_${id} "${target}")
    rank_of(${tlayer} trank)
    if(layer STREQUAL "fixed")
      if(NOT tlayer MATCHES "^(helpers|shape|ops|functions|kernels|fixed)$")
        string(APPEND errors "\n  ${name} (fixed) includes ${target} (${tlayer}): fixed/ may use only helpers, shape, ops, functions, kernels")
      endif()
    elseif(trank GREATER rank)
      string(APPEND errors "\n  ${name} (${layer}) includes ${target} (${tlayer}), a layer above it")
    endif()
  endforeach()
endforeach()

if(errors)
  message(FATAL_ERROR "Includes that run upward against the layer table:${errors}")
endif()

# No cycles, even within a layer: files are taken away while one includes none of those left;
# what stays includes itself through the others.
set(remaining "")
foreach(f IN LISTS files)
  string(REGEX REPLACE "\\|.*$" "" name "${f}")
  list(APPEND remaining "${name}")
endforeach()
set(changed TRUE)
while(changed)
  set(changed FALSE)
  set(next "")
  foreach(n IN LISTS remaining)
    string(MAKE_C_IDENTIFIER "${n}" id)
    set(blocked FALSE)
    foreach(t IN LISTS edges_${id})
      if(t IN_LIST remaining)
        set(blocked TRUE)
        break()
      endif()
    endforeach()
    if(blocked)
      list(APPEND next "${n}")
    else()
      set(changed TRUE)
    endif()
  endforeach()
  set(remaining ${next})
endwhile()
if(remaining)
  string(REPLACE ";" "\n  " remaining "${remaining}")
  message(FATAL_ERROR "Includes in a cycle (each of these includes itself through the others, or one that does):\n  ${remaining}")
endif()

foreach(h IN LISTS headers)
  file(STRINGS "${ROOT}/include/${h}" opens REGEX "^[ \t]*(inline[ \t]+)?namespace[ \t]+([A-Za-z_0-9]+::)*detail([ \t{:]|$)")
  if(opens)
    list(GET opens 0 first)
    string(STRIP "${first}" first)
    string(REGEX REPLACE "^metagrad/" "detail/metagrad/detail/" to "${h}")
    string(APPEND errors "\n  include/${h}: `${first}`: move it to ${to} (docs/architecture.md)")
  endif()
endforeach()
if(errors)
  message(FATAL_ERROR "Public headers that hold internals:${errors}")
endif()
list(LENGTH files n)
message(STATUS "layering: ${n} files follow the layer table")
