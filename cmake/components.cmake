# loom_component(NAME DIRS dir... DEPS target...)
# A static library loom_NAME from every .cpp in DIRS (an INTERFACE library while a
# folder is still empty). Include root is src/, so includes read "core/tensor.h".
set(LOOM_COMPONENTS "")
# AdamW's update (src/ops/adamw.cpp): with errno semantics GCC keeps std::sqrt
# scalar (a check and a libm call per element) even under `omp simd`, and the
# update ran at half the memory bandwidth; nothing reads errno there. torch's
# AdamW rounds the decayed parameter before it adds the step, and the kernel
# matches it bit for bit: no multiply-add may be fused once it is vectorised.
# LAMB and SGD likewise: their CUDA kernels round every operation on its own,
# and with -march=native GCC would fuse here on a CPU with FMA and not on one
# without, so the CPU reference would change with the machine it was built on.
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/ops/adamw.cpp
                            ${PROJECT_SOURCE_DIR}/src/ops/lamb.cpp
                            ${PROJECT_SOURCE_DIR}/src/ops/sgd.cpp
                            PROPERTIES COMPILE_OPTIONS "-fno-math-errno;-ffp-contract=off")
function(loom_component name)
  cmake_parse_arguments(ARG "" "" "DIRS;DEPS" ${ARGN})
  set(sources "")
  foreach(dir ${ARG_DIRS})
    file(GLOB found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${dir}/*.cpp)
    list(APPEND sources ${found})
  endforeach()
  if(sources)
    add_library(loom_${name} STATIC ${sources})
    target_include_directories(loom_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(loom_${name} PUBLIC ${ARG_DEPS})
    target_compile_definitions(loom_${name} PUBLIC $<$<BOOL:${LOOM_MPI}>:LOOM_HAVE_MPI=1>)
    loom_set_warnings(loom_${name})
  else()
    add_library(loom_${name} INTERFACE)
    target_include_directories(loom_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(loom_${name} INTERFACE ${ARG_DEPS})
  endif()
  set(LOOM_COMPONENTS ${LOOM_COMPONENTS} ${name} PARENT_SCOPE)
endfunction()

function(loom_print_summary)
  message(STATUS "Loom ${PROJECT_VERSION} (${CMAKE_BUILD_TYPE})")
  foreach(opt LOOM_CUDA LOOM_MPI LOOM_NCCL LOOM_BUILD_TESTS LOOM_BUILD_BENCH LOOM_SANITIZE LOOM_WERROR)
    if(${opt})
      message(STATUS "  [x] ${opt}")
    else()
      message(STATUS "  [ ] ${opt}")
    endif()
  endforeach()
endfunction()
