# The CUDA backend: one static library `loom_cuda` (CUDA language), built only
# with -DLOOM_CUDA=ON and linked into loom_core. CPU builds never see a CUDA
# header: everything CUDA lives in the cuda/ folders of src/backend, src/ops,
# src/models and src/parallel (CommNccl, host C++ only).
#
# NOTE: CMake 3.25 cannot use CMAKE_CUDA_ARCHITECTURES=native on a machine
# without a GPU (the build machines have none), so the default is explicit
# ("80;90", LoomOptions.cmake); sm_75 is the oldest arch CUDA 13 supports.

if(NOT CMAKE_CUDA_COMPILER)
  find_program(LOOM_NVCC nvcc HINTS ENV CUDA_PATH ENV CUDA_HOME PATHS /usr/local/cuda/bin
               PATH_SUFFIXES bin)
  if(NOT LOOM_NVCC)
    message(FATAL_ERROR "LOOM_CUDA=ON but nvcc was found neither on PATH nor in /usr/local/cuda/bin; "
                        "set CMAKE_CUDA_COMPILER")
  endif()
  set(CMAKE_CUDA_COMPILER ${LOOM_NVCC} CACHE FILEPATH "CUDA compiler" FORCE)
endif()
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to build for" FORCE)
endif()
# One CUDA runtime in the process: the shared libcudart that cuBLAS and NCCL use.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
# NOTE: set after enable_language: CMake 3.25's compiler-ABI probe fails when
# asked for CUDA20 before it has identified nvcc 13. CMake 3.25 also does not
# know nvcc's C++20 flag (3.26 does), so name it when it is missing.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
find_package(CUDAToolkit REQUIRED)

set(LOOM_NCCL_TARGET "")
if(LOOM_NCCL)
  list(APPEND CMAKE_MODULE_PATH ${PROJECT_SOURCE_DIR}/cmake)
  find_package(NCCL)
  if(NCCL_FOUND)
    set(LOOM_NCCL_TARGET NCCL::nccl)
  else()
    message(WARNING "NCCL not found: building the CUDA backend without it")
    set(LOOM_NCCL OFF)
  endif()
endif()

file(GLOB LOOM_CUDA_SOURCES CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu
     ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp
     ${PROJECT_SOURCE_DIR}/src/ops/cuda/*.cu
     ${PROJECT_SOURCE_DIR}/src/ops/cuda/*.cpp
     ${PROJECT_SOURCE_DIR}/src/comm/cuda/*.cpp)
add_library(loom_cuda STATIC ${LOOM_CUDA_SOURCES})
target_include_directories(loom_cuda PUBLIC ${PROJECT_SOURCE_DIR}/src)
# The CUDA backend, its kernel table and NCCL: nothing above the ops.
target_link_libraries(loom_cuda PUBLIC loom_base loom_comm CUDA::cudart
                      CUDA::cublas CUDA::cublasLt ${LOOM_NCCL_TARGET})
target_compile_definitions(loom_cuda PUBLIC LOOM_HAVE_CUDA=1
                           $<$<BOOL:${LOOM_NCCL}>:LOOM_HAVE_NCCL=1>)
# --expt-relaxed-constexpr: core/philox.h's std::array is used in device code.
target_compile_options(loom_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra,-Wshadow=local>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${LOOM_WERROR}>>:--Werror=all-warnings>)
loom_set_warnings(loom_cuda)

target_link_libraries(loom_core INTERFACE loom_cuda)
message(STATUS "CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, "
               "NCCL ${NCCL_VERSION}")
