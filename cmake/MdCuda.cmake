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
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80;90a" CACHE STRING "CUDA architectures")
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
