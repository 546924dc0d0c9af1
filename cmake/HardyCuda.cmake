# Decides whether this build has the CUDA backend (core/src/compute/cuda) and the NCCL communicator
# (comm/src/nccl), from the HARDY_CUDA cache variable:
#   AUTO (default)  on when CMake's check_language(CUDA) finds nvcc AND cuDNN AND NCCL are found,
#                   off otherwise (with a status line naming what is missing)
#   ON              required: a fatal error names what is missing
#   OFF             never (the CPU-only build, unchanged)
# Sets HARDY_HAVE_CUDA (ON/OFF) for the subdirectories, and when ON: the CUDA language, the
# CUDAToolkit targets (CUDA::cudart, CUDA::cublas) and HARDY_CUDNN_INCLUDE_DIR, HARDY_CUDNN_LIBRARY,
# HARDY_NCCL_INCLUDE_DIR, HARDY_NCCL_LIBRARY.
#
# cuDNN and NCCL are looked up next to the toolkit first (NVIDIA's tarballs and this project's
# machines put them into /usr/local/cuda), then under CUDNN_ROOT / NCCL_ROOT (CMake variables or
# environment variables) and the system paths.

set(HARDY_HAVE_CUDA OFF)
if(NOT HARDY_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "HARDY_CUDA must be AUTO, ON or OFF, not '${HARDY_CUDA}'")
endif()

if(NOT HARDY_CUDA STREQUAL "OFF")
  set(_hardy_cuda_missing)
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    list(APPEND _hardy_cuda_missing
         "nvcc (check_language(CUDA) found no CUDA compiler: put nvcc on PATH or set CMAKE_CUDA_COMPILER)")
  else()
    # The toolkit that belongs to this nvcc, so that headers and libraries match the compiler.
    get_filename_component(_hardy_nvcc_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(_hardy_cuda_root "${_hardy_nvcc_bin}" DIRECTORY)
    find_package(CUDAToolkit QUIET)
    if(NOT CUDAToolkit_FOUND)
      list(APPEND _hardy_cuda_missing "the CUDA toolkit libraries (find_package(CUDAToolkit) failed)")
    elseif(NOT TARGET CUDA::cublas)
      list(APPEND _hardy_cuda_missing "cuBLAS (CUDA::cublas)")
    endif()
  endif()

  set(_hardy_cuda_hints ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR} ${_hardy_cuda_root})
  find_path(HARDY_CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${_hardy_cuda_hints} ${CUDNN_ROOT} ENV CUDNN_ROOT PATH_SUFFIXES include)
  find_library(HARDY_CUDNN_LIBRARY cudnn
               HINTS ${_hardy_cuda_hints} ${CUDNN_ROOT} ENV CUDNN_ROOT PATH_SUFFIXES lib64 lib)
  find_path(HARDY_NCCL_INCLUDE_DIR nccl.h
            HINTS ${_hardy_cuda_hints} ${NCCL_ROOT} ENV NCCL_ROOT PATH_SUFFIXES include)
  find_library(HARDY_NCCL_LIBRARY nccl
               HINTS ${_hardy_cuda_hints} ${NCCL_ROOT} ENV NCCL_ROOT PATH_SUFFIXES lib64 lib)
  if(NOT HARDY_CUDNN_INCLUDE_DIR OR NOT HARDY_CUDNN_LIBRARY)
    list(APPEND _hardy_cuda_missing "cuDNN (cudnn.h and libcudnn; set CUDNN_ROOT)")
  else()
    # The legacy convolution API hardy uses is cuDNN 8 and 9's; cuDNN 7 lacks bf16.
    file(STRINGS "${HARDY_CUDNN_INCLUDE_DIR}/cudnn_version.h" _hardy_cudnn_major
         REGEX "^#define CUDNN_MAJOR [0-9]+")
    string(REGEX REPLACE ".* ([0-9]+)$" "\\1" _hardy_cudnn_major "${_hardy_cudnn_major}")
    if(_hardy_cudnn_major LESS 8)
      list(APPEND _hardy_cuda_missing "cuDNN 8 or newer (found major version ${_hardy_cudnn_major})")
    endif()
  endif()
  if(NOT HARDY_NCCL_INCLUDE_DIR OR NOT HARDY_NCCL_LIBRARY)
    list(APPEND _hardy_cuda_missing "NCCL (nccl.h and libnccl; set NCCL_ROOT)")
  else()
    # ncclCommShrink (the shrink after a failure) arrived in NCCL 2.27.
    file(STRINGS "${HARDY_NCCL_INCLUDE_DIR}/nccl.h" _hardy_nccl_shrink REGEX "ncclCommShrink")
    if(NOT _hardy_nccl_shrink)
      list(APPEND _hardy_cuda_missing "an NCCL with ncclCommShrink (2.27 or newer)")
    endif()
  endif()

  if(_hardy_cuda_missing)
    list(JOIN _hardy_cuda_missing "; " _hardy_cuda_missing_text)
    if(HARDY_CUDA STREQUAL "ON")
      message(FATAL_ERROR "HARDY_CUDA=ON but the CUDA backend cannot be built: missing ${_hardy_cuda_missing_text}")
    endif()
    message(STATUS "hardy: CUDA backend off (HARDY_CUDA=AUTO; missing ${_hardy_cuda_missing_text})")
  else()
    # sm_90 is the H100/H200; more can be given, e.g. -DCMAKE_CUDA_ARCHITECTURES="80;90".
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # C++20 for the .cu files too (they include hardy's headers). CMake takes a CUDA target's
    # dialect from CXX_STANDARD, but CMake 3.25 does not know nvcc 12+'s C++20 flag; teach it.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_EXTENSIONS OFF)
    set(HARDY_HAVE_CUDA ON)
    message(STATUS "hardy: CUDA backend on: nvcc ${CMAKE_CUDA_COMPILER_VERSION} for sm_${CMAKE_CUDA_ARCHITECTURES}, "
                   "cuDNN ${HARDY_CUDNN_LIBRARY}, NCCL ${HARDY_NCCL_LIBRARY}")
  endif()
endif()
