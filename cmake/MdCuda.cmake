#===- MdCuda.cmake - detect nvcc + cuBLASLt + NCCL -------------------------===#
#
# MD_ENABLE_CUDA defaults to ON exactly when the toolkit's compiler, cuBLASLt
# and NCCL are all found; -DMD_ENABLE_CUDA=OFF switches the CUDA part off, and
# -DMD_ENABLE_CUDA=ON makes a missing piece a configuration error.
#
#===----------------------------------------------------------------------===#
include(CheckLanguage)

set(_md_cuda_default OFF)
set(_md_cuda_why "")
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt)
    find_path(NCCL_INCLUDE_DIR nccl.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME ENV NCCL_ROOT
      PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl
      HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ENV NCCL_HOME ENV NCCL_ROOT
      PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(_md_cuda_default ON)
    else()
      set(_md_cuda_why "NCCL not found (nccl.h / libnccl)")
    endif()
  else()
    set(_md_cuda_why "CUDA toolkit or cuBLASLt not found")
  endif()
else()
  set(_md_cuda_why "no CUDA compiler (nvcc) found")
endif()

option(MD_ENABLE_CUDA "Build the CUDA/cuBLASLt/NCCL backend" ${_md_cuda_default})

if(MD_ENABLE_CUDA)
  if(NOT _md_cuda_default)
    message(FATAL_ERROR "MD_ENABLE_CUDA=ON but ${_md_cuda_why}")
  endif()
  # The GPUs users train on, each with its own machine code: Ampere (80
  # A100, 86 RTX 30xx/A40), Ada (89 RTX 40xx/L40), Hopper (90 H100/H200),
  # Blackwell (100 B200/GB200, 120 RTX 50xx); sm_103 and sm_121 run the code
  # of 100 and 120. Plus compute_120 PTX, which the driver compiles for
  # GPUs newer than this list. -DCMAKE_CUDA_ARCHITECTURES=native builds for
  # the GPUs of the building machine alone (bench/gpu_check.sh does).
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80-real;86-real;89-real;90-real;100-real;120"
        CACHE STRING "CUDA architectures")
  endif()
  # Link cudart once, as a shared library.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
  message(STATUS "md: CUDA ${CUDAToolkit_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}, NCCL ${NCCL_LIBRARY}")
elseif(_md_cuda_why)
  message(STATUS "md: CUDA backend off (${_md_cuda_why})")
else()
  message(STATUS "md: CUDA backend off (MD_ENABLE_CUDA=OFF)")
endif()
