# metagrad_add_aot_library(NAME GENERATOR gen.cpp [SHARED] [GENERATOR_ARGS args...]
#                          [COMPILE_OPTIONS opts...])
#
# Ahead-of-time compilation of a static model, like Halide's add_halide_library: builds the
# generator program `gen.cpp` (it links metagrad::metagrad and ends in
# `return metagrad::aot::Generator(...).main(argc, argv)` after defining its functions), runs it at
# build time (`gen -o DIR -n NAME GENERATOR_ARGS...`) to write NAME.c and NAME.h into ${CMAKE_CURRENT_BINARY_DIR}/NAME.aot/, and builds the
# library NAME (static, or SHARED) from them. NAME links only libc and libm: metagrad, a compiler
# and LLVM are needed to build it, not to run it. Link it and `#include "NAME.h"` (the include
# directory is part of the target). The C source stays in NAME.aot/ to read. A static model's
# generator lowers its forward with metagrad::Lowering and its training step's gradients with
# Lowering::grad, fixed::grad's own rules (examples/fashion_mnist_aot, examples/gpt_aot).
#
# The project must enable C (`project(x C CXX)`): the generated kernels are C.
function(metagrad_add_aot_library name)
  cmake_parse_arguments(PARSE_ARGV 1 AOT "SHARED" "GENERATOR" "GENERATOR_ARGS;COMPILE_OPTIONS")
  _metagrad_aot_check("metagrad_add_aot_library(${name})" GENERATOR gen.cpp)
  add_executable(${name}_generator ${AOT_GENERATOR})
  target_link_libraries(${name}_generator PRIVATE metagrad::metagrad)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/${name}.aot)
  # DEVICE=CLANG: the generator computes (and captures) its kernels with the C renderer.
  add_custom_command(OUTPUT ${dir}/${name}.c ${dir}/${name}.h
    COMMAND ${CMAKE_COMMAND} -E env DEVICE=CLANG $<TARGET_FILE:${name}_generator> -o ${dir} -n ${name}
            ${AOT_GENERATOR_ARGS}
    DEPENDS ${name}_generator
    COMMENT "metagrad AOT: generating ${name}.c and ${name}.h"
    VERBATIM)
  _metagrad_aot_c_library(${name} ${dir} "${AOT_SHARED}" ${AOT_COMPILE_OPTIONS})
endfunction()

# metagrad_add_onnx_library(NAME MODEL file.onnx [INPUTS name=1x3x224x224 ...] [SHARED]
#                           [CONSTANTS bin|c] [COMPILE_OPTIONS opts...])
#
# An ONNX model compiled ahead of time (docs/onnx.md): runs `metagrad-aot file.onnx -o DIR -n NAME
# --input ...` at build time (INPUTS fix the symbolic dimensions) into ${CMAKE_CURRENT_BINARY_DIR}/NAME.aot/
# and builds the library NAME (static, or SHARED) from NAME.c, which links NAME.bin (the weights)
# with .incbin; CONSTANTS c writes them into the C instead. `#include "NAME.h"` and call
# NAME_run(inputs..., outputs...). Needs metagrad built with metagrad::onnx (its metagrad-aot).
function(metagrad_add_onnx_library name)
  cmake_parse_arguments(PARSE_ARGV 1 AOT "SHARED" "MODEL;CONSTANTS" "INPUTS;COMPILE_OPTIONS")
  _metagrad_aot_check("metagrad_add_onnx_library(${name})" MODEL file.onnx)
  if(NOT TARGET metagrad::metagrad-aot)
    message(FATAL_ERROR "metagrad_add_onnx_library(${name}): metagrad-aot is missing: metagrad was built "
                        "without ONNX (Debian: libonnx-dev libprotobuf-dev)")
  endif()
  if(NOT AOT_CONSTANTS)
    set(AOT_CONSTANTS bin)
  endif()
  get_filename_component(model ${AOT_MODEL} ABSOLUTE)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/${name}.aot)
  set(args)
  foreach(input IN LISTS AOT_INPUTS)
    list(APPEND args --input ${input})
  endforeach()
  set(outputs ${dir}/${name}.c ${dir}/${name}.h)
  if(AOT_CONSTANTS STREQUAL "bin")
    list(APPEND outputs ${dir}/${name}.bin)
  endif()
  add_custom_command(OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -E env DEVICE=CLANG $<TARGET_FILE:metagrad::metagrad-aot> ${model} -o ${dir}
            -n ${name} --constants=${AOT_CONSTANTS} ${args}
    DEPENDS metagrad::metagrad-aot ${model}
    COMMENT "metagrad AOT: compiling ${AOT_MODEL} to ${name}.c and ${name}.h"
    VERBATIM)
  _metagrad_aot_c_library(${name} ${dir} "${AOT_SHARED}" ${AOT_COMPILE_OPTIONS})
  if(AOT_CONSTANTS STREQUAL "bin")  # read by the assembler, unseen by the compiler's dependencies
    set_source_files_properties(${dir}/${name}.c PROPERTIES OBJECT_DEPENDS ${dir}/${name}.bin)
  endif()
endfunction()

# The library NAME from DIR/NAME.c: C99 with GNU extensions, the CLANG device's flags at -O3 for
# this machine (or the target the extra arguments name), libc, libm and threads only.
function(_metagrad_aot_c_library name dir shared)
  if(shared)
    add_library(${name} SHARED ${dir}/${name}.c ${dir}/${name}.h)
  else()
    add_library(${name} STATIC ${dir}/${name}.c ${dir}/${name}.h)
  endif()
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE C C_STANDARD 99 C_EXTENSIONS ON
                                           POSITION_INDEPENDENT_CODE ON)
  # The CLANG device's flags for these kernels (-fopenmp-simd: a sum's `#pragma omp simd
  # reduction`, no OpenMP runtime; GCC's -O2 vectorizes little without the dynamic cost model),
  # at -O3: MobileNet v2 took 12.3 ms of CPU rather than 18.4 (its depthwise and elementwise kernels
  # unrolled and vectorized). The library is built for the machine that builds it (-march=native,
  # the GEMM's widest vectors: docs/gemm.md) unless the extra arguments name a target (-march=,
  # -mcpu=); they come after.
  set(target -march=native)
  if("${ARGN}" MATCHES "-march=|-mcpu=")
    set(target)
  endif()
  target_compile_options(${name} PRIVATE -O3 -fno-math-errno -fopenmp-simd
                         $<$<C_COMPILER_ID:GNU>:-fvect-cost-model=dynamic> ${target} ${ARGN})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${dir}>)
  # Threads only for NAME_set_threads's products; from glibc 2.34 they are part of libc.
  find_package(Threads REQUIRED)
  target_link_libraries(${name} PUBLIC Threads::Threads)
  find_library(METAGRAD_LIBM m)
  if(METAGRAD_LIBM)
    target_link_libraries(${name} PUBLIC ${METAGRAD_LIBM})
  endif()
endfunction()

# What both functions check of their arguments (AOT_*): `required` given, nothing unknown, and C
# enabled in the project.
macro(_metagrad_aot_check who required example)
  if(NOT AOT_${required})
    message(FATAL_ERROR "${who}: ${required} ${example} is required")
  endif()
  if(AOT_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${who}: unknown arguments ${AOT_UNPARSED_ARGUMENTS}")
  endif()
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "C" IN_LIST languages)
    message(FATAL_ERROR "${who}: the generated kernels are C; enable the "
                        "language in the project (project(... C CXX) or enable_language(C))")
  endif()
endmacro()
