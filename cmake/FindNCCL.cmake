# FindNCCL.cmake - finds NCCL (nccl.h, libnccl.so) in the CUDA toolkit, NCCL_ROOT, or Python's nvidia-nccl
# package; defines NCCL_FOUND and the imported target NCCL::NCCL.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_INCLUDE_DIRS}/..)
file(GLOB _nccl_py LIST_DIRECTORIES true /usr/local/lib/python3*/dist-packages/nvidia/nccl
     /usr/lib/python3/dist-packages/nvidia/nccl $ENV{HOME}/.local/lib/python3*/site-packages/nvidia/nccl
     /usr/local/lib/python3*/site-packages/nvidia/nccl)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} ${_nccl_py} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} ${_nccl_py}
             PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR)
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
