# FindCUDNN.cmake - finds cuDNN (cudnn.h, libcudnn.so) in the CUDA toolkit, CUDNN_ROOT, or Python's
# nvidia-cudnn package; defines CUDNN_FOUND and the imported target CUDNN::CUDNN.
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_HOME} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_INCLUDE_DIRS}/..)
file(GLOB _cudnn_py LIST_DIRECTORIES true /usr/local/lib/python3*/dist-packages/nvidia/cudnn
     /usr/lib/python3/dist-packages/nvidia/cudnn $ENV{HOME}/.local/lib/python3*/site-packages/nvidia/cudnn
     /usr/local/lib/python3*/site-packages/nvidia/cudnn)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS} ${_cudnn_py} PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR} ${_cudnn_py}
             PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR)
if(CUDNN_FOUND AND NOT TARGET CUDNN::CUDNN)
  add_library(CUDNN::CUDNN UNKNOWN IMPORTED)
  set_target_properties(CUDNN::CUDNN PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                                                INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
