// in_training_fit.cpp - alpha_eff / B_eff from nooverlap runs' exposed communication.
#include "runtime/sim/in_training_fit.h"

#include "runtime/core/error.h"

namespace ddp::sim {

NetworkModel fit_in_training_network(const std::vector<ExposedCommunication>& runs, int world,
                                     AllreduceAlgorithm algorithm, double copy_bytes_per_s) {
  DDP_CHECK(copy_bytes_per_s >= 0, "fit_in_training_network: copy bandwidth ", copy_bytes_per_s,
            " bytes/s must be >= 0");
  DDP_CHECK(runs.size() >= 2, "fit_in_training_network: ", runs.size(),
            " nooverlap run(s); need runs of at least two models with different bytes per bucket");
  std::vector<MeasuredAllreduce> points;
  for (auto& r : runs) {
    DDP_CHECK(r.buckets >= 1 && r.bytes > 0, "fit_in_training_network: run '", r.label, "' has ", r.buckets,
              " bucket(s) and ", r.bytes, " bytes; both must be positive");
    const double write_back = copy_bytes_per_s > 0 ? r.bytes / copy_bytes_per_s : 0.0;
    const double collectives = r.exposed_s - write_back;
    DDP_CHECK(collectives > 0, "fit_in_training_network: run '", r.label, "' exposed ", r.exposed_s * 1e3,
              " ms, no more than its write-back copy (", write_back * 1e3,
              " ms); check the copy bandwidth or that the run used overlap=false");
    points.push_back({r.bytes, collectives, static_cast<double>(r.buckets)});
  }
  return fit_network_model(points, world, algorithm);
}

}  // namespace ddp::sim
