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
  if(NOT AOT_GENERATOR)
    message(FATAL_ERROR "metagrad_add_aot_library(${name}): GENERATOR gen.cpp is required")
  endif()
  if(AOT_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "metagrad_add_aot_library(${name}): unknown arguments ${AOT_UNPARSED_ARGUMENTS}")
  endif()
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "C" IN_LIST languages)
    message(FATAL_ERROR "metagrad_add_aot_library(${name}): the generated kernels are C; enable the "
                        "language in the project (project(... C CXX) or enable_language(C))")
  endif()
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
  if(AOT_SHARED)
    add_library(${name} SHARED ${dir}/${name}.c ${dir}/${name}.h)
  else()
    add_library(${name} STATIC ${dir}/${name}.c ${dir}/${name}.h)
  endif()
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE C C_STANDARD 99 C_EXTENSIONS ON
                                           POSITION_INDEPENDENT_CODE ON)
  # The CLANG device's flags for these kernels (-fopenmp-simd: a sum's `#pragma omp simd
  # reduction`, no OpenMP runtime). COMPILE_OPTIONS come after: -march=native (or the target
  # machine's -march) gives the contractions' GEMM its widest vectors (docs/gemm.md).
  target_compile_options(${name} PRIVATE -O2 -fno-math-errno -fopenmp-simd ${AOT_COMPILE_OPTIONS})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${dir}>)
  # Threads only for NAME_set_threads's products; from glibc 2.34 they are part of libc.
  find_package(Threads REQUIRED)
  target_link_libraries(${name} PUBLIC Threads::Threads)
  find_library(METAGRAD_LIBM m)
  if(METAGRAD_LIBM)
    target_link_libraries(${name} PUBLIC ${METAGRAD_LIBM})
  endif()
endfunction()
