// calibration_cache.cpp - file names of cached bench_allreduce calibrations and the look-up of one.
#include "runtime/sim/calibration_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace ddp::sim {

namespace {
std::string file_safe(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_';
    if (!ok) c = '_';
  }
  return out;
}
}  // namespace

std::string default_calibration_dir() {
  const char* v = std::getenv("DDP_CALIBRATION_DIR");
  return v && *v ? std::string(v) : std::string("runs/calibration");
}

std::string calibration_file_name(const std::string& backend, const std::string& host, int world) {
  DDP_CHECK(!backend.empty(), "calibration file name: the backend is empty (e.g. shm, gloo, nccl)");
  DDP_CHECK(!host.empty(), "calibration file name: the host name is empty");
  DDP_CHECK(world >= 1, "calibration file name: world size ", world, " must be >= 1");
  return "allreduce-" + file_safe(backend) + "-" + file_safe(host) + "-w" + std::to_string(world) + ".json";
}

NetworkModel network_from_allreduce_json(const std::string& path, int world, int* fit_world) {
  std::ifstream in(path);
  DDP_CHECK(in.good(), "cannot read the all-reduce calibration ", path);
  std::string line;
  int n = 0;
  nlohmann::json best;
  bool found = false, exact = false;
  // A field of another type than bench_allreduce writes is an error naming the file and line (never the JSON
  // library's own exception).
  const auto text = [&](const nlohmann::json& j, const char* key) {
    DDP_CHECK(!j.contains(key) || j[key].is_string(), path, " line ", n, ": \"", key,
              "\" is not a string; the file is not bench_allreduce --json output (damaged?): run "
              "tools/sweep.sh again");
    return j.value(key, std::string());
  };
  const auto number = [&](const nlohmann::json& j, const char* key) {
    DDP_CHECK(j.contains(key) && j[key].is_number(), path, " line ", n, ": \"", key,
              "\" is missing or not a number; the file is not bench_allreduce --json output (damaged?): run "
              "tools/sweep.sh again");
    return j[key].get<double>();
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    DDP_CHECK(!j.is_discarded(), path, " line ", n, " is not JSON (expected bench_allreduce --json records, one a line)");
    DDP_CHECK(j.is_object(), path, " line ", n,
              " is not a JSON object (expected bench_allreduce --json records)");
    if (text(j, "kind") != "allreduce" || !j.contains("fit")) continue;
    DDP_CHECK(j["fit"].is_object(), path, " line ", n,
              ": \"fit\" is not an object; run tools/sweep.sh again");
    DDP_CHECK(!j.contains("world") || j["world"].is_number_integer(), path, " line ", n,
              ": \"world\" is not a whole number; run tools/sweep.sh again");
    const std::string algorithm = text(j["fit"], "algorithm");
    DDP_CHECK(algorithm.empty() || algorithm == "ring" || algorithm == "tree", path, " line ", n,
              ": the fit's algorithm '", algorithm, "' is neither ring nor tree; run tools/sweep.sh again");
    number(j["fit"], "alpha_s");
    number(j["fit"], "bandwidth_bytes_per_s");
    const bool match = j.value("world", int64_t{0}) == world;
    if (match || !exact) {
      best = std::move(j);
      found = true;
      exact = exact || match;
    }
  }
  DDP_CHECK(found, path,
            " has no all-reduce record with a fit; run bench_allreduce with world >= 2 and --json "
            "(tools/sweep.sh does)");
  const auto& fit = best["fit"];
  DDP_CHECK(fit.contains("alpha_s") && fit.contains("bandwidth_bytes_per_s"), path,
            ": the all-reduce record's fit lacks alpha_s or bandwidth_bytes_per_s");
  NetworkModel m;
  m.algorithm = parse_algorithm(fit.value("algorithm", "ring"));
  m.alpha_s = fit["alpha_s"].get<double>();
  m.bandwidth_bytes_per_s = fit["bandwidth_bytes_per_s"].get<double>();
  DDP_CHECK(m.alpha_s >= 0 && m.bandwidth_bytes_per_s > 0, path, ": the fit (alpha ", m.alpha_s,
            " s, B ", m.bandwidth_bytes_per_s, " bytes/s) needs alpha >= 0 and B > 0");
  if (fit_world) {
    const int64_t w = best.value("world", int64_t{0});
    *fit_world = w >= 0 && w <= (int64_t{1} << 30) ? static_cast<int>(w) : 0;
  }
  return m;
}

std::optional<CachedCalibration> find_calibration(const std::string& dir, const std::string& backend,
                                                  const std::string& host, int world) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  const std::string exact = calibration_file_name(backend, host, world);
  // Other worlds: the same name up to "-w"; the world is the number between "-w" and ".json".
  const std::string stem = exact.substr(0, exact.rfind("-w") + 2);
  std::string chosen;
  int chosen_world = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(stem, 0) != 0 || name.size() <= stem.size() + 5 ||
        name.compare(name.size() - 5, 5, ".json") != 0)
      continue;
    const std::string digits = name.substr(stem.size(), name.size() - stem.size() - 5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9)
      continue;
    const int w = std::stoi(digits);
    const auto distance = [world](int v) { return v > world ? v - world : world - v; };
    if (chosen.empty() || distance(w) < distance(chosen_world) ||
        (distance(w) == distance(chosen_world) && w < chosen_world)) {
      chosen = entry.path().string();
      chosen_world = w;
    }
  }
  if (chosen.empty()) return std::nullopt;
  CachedCalibration c;
  c.path = chosen;
  int fit_world = 0;
  c.network = network_from_allreduce_json(chosen, chosen_world, &fit_world);
  c.world = fit_world > 0 ? fit_world : chosen_world;
  return c;
}

}  // namespace ddp::sim
