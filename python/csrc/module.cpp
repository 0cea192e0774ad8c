// module.cpp - the Python module ddp_cpp._C: the backend class (a subclass of torch's Backend, so
// torch.distributed can hold it), the creator that ddp_cpp/torch.py registers, and flight-record access.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "backend.h"
#include "c10d_store_client.h"
#include "runtime/distributed/shm/host_identity.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/flight_recorder.h"

namespace {

std::chrono::milliseconds ms_of(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         double timeout_s, std::vector<int> hosts,
                                         c10::intrusive_ptr<c10d::Backend> leaders) {
  py::gil_scoped_release nogil;  // the set-up waits for the peers through the store
  return c10::make_intrusive<ddp_torch::DdpCppBackend>(store, rank, size, ms_of(timeout_s), std::move(hosts),
                                                       std::move(leaders));
}

// Every rank's host index (hosts numbered in order of their lowest rank), from the host identities the ranks
// publish through the store (runtime/distributed/shm/host_identity.h).
std::vector<int> host_of_ranks(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s,
                               const std::string& identity) {
  py::gil_scoped_release nogil;
  ddp::dist::Store ddp_store(std::make_unique<ddp_torch::C10dStoreClient>(store), ms_of(timeout_s));
  return ddp::dist::shm::host_of_ranks(ddp_store, "ddpcpp", rank, size, ms_of(timeout_s), identity);
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
        py::arg("hosts") = std::vector<int>{}, py::arg("leaders") = c10::intrusive_ptr<c10d::Backend>(),
        "Makes the ddpcpp backend of one group (torch.distributed calls it through ddp_cpp.torch); with `hosts` "
        "on several hosts, `leaders` is the Gloo group of the hosts' lowest ranks");
  m.def("host_of_ranks", &host_of_ranks, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
        py::arg("identity") = "",
        "Every rank's host index from the ranks' host identities (`identity`, or this process's real one), "
        "exchanged through the store (collective: every rank calls it)");
  m.def("host_identity", &ddp::dist::shm::host_identity, "This process's host identity string");
  m.def("dump_flight_record", &ddp::dist::dump_flight_record, py::arg("path"),
        "Writes the flight record of every ddp.cpp group of this process to `path` (JSON)");
}
