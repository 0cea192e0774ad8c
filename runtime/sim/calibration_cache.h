// calibration_cache.h - the bucket simulator's cached network calibrations: one bench_allreduce --json file per
// backend, host and world size, DIR/allreduce-<backend>-<host>-w<world>.json (tools/sweep.sh writes them, by
// default under runs/calibration), and how bucket_sim finds the one of the backend it plans for, so that its
// default network is a measurement of that backend on this machine rather than a placeholder.
#pragma once
#include <optional>
#include <string>

#include "runtime/sim/network_model.h"

namespace ddp::sim {

// $DDP_CALIBRATION_DIR when set and not empty, else "runs/calibration" (relative to the working directory).
std::string default_calibration_dir();

// "allreduce-<backend>-<host>-w<world>.json"; characters of backend or host outside [A-Za-z0-9._] become '_'
// (a host name may hold anything). Empty backend or host, or world < 1, is an error naming it.
std::string calibration_file_name(const std::string& backend, const std::string& host, int world);

// The ring fit of the last all-reduce record in a bench_allreduce --json file (JSON lines) whose world is
// `world`, or of the last record with a fit when none matches; *fit_world gets that record's world. Errors
// name the file: unreadable, a line that is not JSON, no record with a fit.
NetworkModel network_from_allreduce_json(const std::string& path, int world, int* fit_world = nullptr);

struct CachedCalibration {
  std::string path;   // the file the fit came from
  int world = 0;      // the world size it was measured at
  NetworkModel network;
};

// The calibration of (backend, host) at `world` in `dir`; when there is none at that world, the one at the
// nearest other world (the smaller on a tie), whose alpha and B per link the cost formulas scale. nullopt when
// the folder holds no file of that backend and host. A file that exists but cannot be read is an error.
std::optional<CachedCalibration> find_calibration(const std::string& dir, const std::string& backend,
                                                  const std::string& host, int world);

}  // namespace ddp::sim
