# setup.py - builds ddp_cpp._C, the C++ extension behind the "ddpcpp" backend: the backend (python/csrc) and the
# ddp.cpp runtime sources it needs (the shm process group, its store, the flight recorder), compiled in, so the
# package needs no CMake build and no libddp.so at run time. pyproject.toml holds the metadata.
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The runtime files the shm and hier groups need, and nothing that needs the tensor library, BLAS or Gloo (across
# hosts the leaders talk through PyTorch's own Gloo: csrc/c10d_group.h).
RUNTIME = [
    "runtime/core/device.cpp",
    "runtime/core/env_number.cpp",
    "runtime/core/log.cpp",
    "runtime/core/terminal_text.cpp",
    "runtime/distributed/collective.cpp",
    "runtime/distributed/collective_tracker.cpp",
    "runtime/distributed/ddp_store_client.cpp",
    "runtime/distributed/flight_progress.cpp",
    "runtime/distributed/flight_recorder.cpp",
    "runtime/distributed/process_group.cpp",
    "runtime/distributed/queued_process_group.cpp",
    "runtime/distributed/sha256.cpp",
    "runtime/distributed/socket_io.cpp",
    "runtime/distributed/store.cpp",
    "runtime/distributed/store_frame_auth.cpp",
    "runtime/distributed/store_protocol.cpp",
    "runtime/distributed/torch_store_client.cpp",
    "runtime/distributed/host_reduce.cpp",
    "runtime/distributed/shm/hier_group.cpp",
    "runtime/distributed/shm/host_identity.cpp",
    "runtime/distributed/shm/shm_group.cpp",
    "runtime/distributed/shm/shm_inplace.cpp",
    "runtime/distributed/shm/shm_reduce.cpp",
    "runtime/distributed/shm/shm_segment.cpp",
    "runtime/distributed/shm/shm_sync.cpp",
    "runtime/distributed/shm/shm_verdict.cpp",
]
BACKEND = ["csrc/backend.cpp", "csrc/c10d_group.cpp", "csrc/c10d_store_client.cpp", "csrc/module.cpp", "csrc/staging.cpp", "csrc/torch_work.cpp"]

setup(
    ext_modules=[
        CppExtension(
            "ddp_cpp._C",
            # Relative paths: setuptools wants them, and object files then land under build/ in this folder.
            sources=BACKEND + [os.path.relpath(os.path.join(ROOT, f), HERE) for f in RUNTIME],
            include_dirs=[ROOT, os.path.join(HERE, "csrc")],
            extra_compile_args=["-std=c++20", "-O3", "-Wno-unused-parameter"],
            libraries=["rt"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
