// nvrtc_on_demand.cpp - the seven NVRTC functions the cuDNN frontend's headers reference (for an experimental
// Blackwell norm engine that the fused attention never uses), resolved from libnvrtc.so.13 on their first call
// instead of at load time: linking NVRTC would make libddp.so fail to load on a GPU machine that has cuDNN and
// cuBLAS but no NVRTC. Hidden (-fvisibility=hidden for this file, CMakeLists.txt): only libddp.so's own
// references bind to them, never another library's. Without NVRTC each returns NVRTC_ERROR_INTERNAL_ERROR,
// which the frontend reports as that engine being unavailable.
#include <dlfcn.h>
#include <nvrtc.h>

namespace {
void* nvrtc_symbol(const char* name) {
  static void* lib = [] {
    void* h = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    return h ? h : dlopen("libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
  }();
  return lib ? dlsym(lib, name) : nullptr;
}

template <class Fn, class... Args>
nvrtcResult forward_to(const char* name, Args... args) {
  auto* fn = reinterpret_cast<Fn*>(nvrtc_symbol(name));
  return fn ? fn(args...) : NVRTC_ERROR_INTERNAL_ERROR;
}
}  // namespace

extern "C" {
nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                               const char* const* headers, const char* const* include_names) {
  return forward_to<decltype(nvrtcCreateProgram)>("nvrtcCreateProgram", prog, src, name, num_headers, headers,
                                                  include_names);
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  return forward_to<decltype(nvrtcDestroyProgram)>("nvrtcDestroyProgram", prog);
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char* const* options) {
  return forward_to<decltype(nvrtcCompileProgram)>("nvrtcCompileProgram", prog, num_options, options);
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) {
  return forward_to<decltype(nvrtcGetCUBINSize)>("nvrtcGetCUBINSize", prog, size);
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  return forward_to<decltype(nvrtcGetCUBIN)>("nvrtcGetCUBIN", prog, cubin);
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
  return forward_to<decltype(nvrtcGetProgramLogSize)>("nvrtcGetProgramLogSize", prog, size);
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  return forward_to<decltype(nvrtcGetProgramLog)>("nvrtcGetProgramLog", prog, log);
}
}
