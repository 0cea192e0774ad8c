// module.cpp - the Python module ddp_cpp._C: the backend class (a subclass of torch's Backend, so
// torch.distributed can hold it), the creator that ddp_cpp/torch.py registers, and flight-record access.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "backend.h"
#include "runtime/distributed/flight_recorder.h"

namespace {

c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         double timeout_s) {
  const auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  py::gil_scoped_release nogil;  // the set-up waits for the peers through the store
  return c10::make_intrusive<ddp_torch::DdpCppBackend>(store, rank, size, ms);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ddp.cpp's shared-memory collectives as the torch.distributed backend 'ddpcpp'";
  py::object backend = py::module::import("torch._C._distributed_c10d").attr("Backend");
  py::class_<ddp_torch::DdpCppBackend, c10::intrusive_ptr<ddp_torch::DdpCppBackend>>(m, "DdpCppBackend", backend)
      .def("flight_record_json", &ddp_torch::DdpCppBackend::flight_record_json,
           "This group's recent collectives as JSON (docs/debugging.md, 'Flight recorder')")
      .def("inner_backend", &ddp_torch::DdpCppBackend::inner_backend)
      .def("collectives_run_on", &ddp_torch::DdpCppBackend::collectives_run_on,
           "'caller' when collectives run on the thread that issues them, 'thread' on the group's own thread "
           "(DDP_TORCH_COLLECTIVES)");
  m.def("create_backend", &create, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
        "Makes the ddpcpp backend of one group (torch.distributed calls it through ddp_cpp.torch)");
  m.def("dump_flight_record", &ddp::dist::dump_flight_record, py::arg("path"),
        "Writes the flight record of every ddp.cpp group of this process to `path` (JSON)");
}
