// bucket_sim.cpp - `bucket_sim`: predicts DDP step time and exposed communication over a range of bucket caps
// and recommends the cap with the lowest predicted step (the model: runtime/sim/bucket_sim.h, formulas and
// calibration: docs/simulator.md). With --validate it compares its predictions with bench_e2e records.
//
//   bucket_sim --model gpt --world 64 --alpha-us 20 --bandwidth-gbps 10 --backward-ms 40 --forward-ms 20
//   bucket_sim --checkpoint model.safetensors --world 1024 --algorithm tree ...
//   bucket_sim --validate runs/bench.json --network-json runs/net.json     # measured vs predicted
// The network: --network-json or --alpha-us/--bandwidth-gbps, else the cached bench_allreduce calibration of
// the backend in use on this host (runtime/sim/calibration_cache.h; tools/sweep.sh makes it), else a placeholder
// that the output calls one, with how to calibrate. The output names the source.
// Exit codes: 2 bad command line, 1 bad input, 3 a validation error above --max-error-pct.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <tuple>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/gpt.h"
#include "models/mlp.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/core/terminal_text.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/sim/bucket_sim.h"
#include "runtime/sim/calibration_cache.h"
#include "runtime/sim/in_training_fit.h"
#include "runtime/sim/param_list.h"
#include "runtime/sim/trace_ready_times.h"

namespace {

using namespace ddp::sim;
using Json = nlohmann::json;

// The parameter shapes of bench_e2e's named configurations (same constructors, registration order).
std::vector<ParamShape> model_shapes(const std::string& name) {
  std::shared_ptr<ddp::nn::Module> m;
  if (name == "mlp") {
    m = std::make_shared<ddp::models::MLP>(ddp::models::MLPConfig{});
  } else {
    ddp::models::GPTConfig c;
    if (name == "gpt2s") {
      c.vocab = 50257;
      c.context = 1024;
      c.d_model = 768;
      c.n_head = 12;
      c.n_layer = 12;
    }
    m = std::make_shared<ddp::models::GPT>(c);
  }
  std::vector<ParamShape> out;
  for (auto& p : m->named_parameters()) out.push_back({p.name, p.tensor.shape(), p.tensor.dtype()});
  return out;
}

std::vector<ParamShape> checkpoint_shapes(const std::string& path) {
  auto content = ddp::checkpoint::read_safetensors(path);
  std::vector<ParamShape> out;
  for (auto& t : content.tensors) out.push_back({t.name, t.shape, t.dtype});
  DDP_CHECK(!out.empty(), "bucket_sim: checkpoint ", path, " holds no tensors");
  return out;
}

int64_t default_batch(const std::string& config) { return config == "mlp" ? 64 : (config == "gpt" ? 16 : 8); }

std::vector<double> parse_caps(const std::string& s) {
  std::vector<double> caps;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || !(v > 0))
      throw ddp::cli::UsageError("bucket_sim: --caps item '" + item +
                                 "' is not a positive number of MiB (example: --caps 0.25,1,4,25,100)");
    caps.push_back(v);
  }
  if (caps.empty()) throw ddp::cli::UsageError("bucket_sim: --caps is empty");
  return caps;
}

std::vector<Json> read_records(const std::string& path, const std::string& kind) {
  std::ifstream in(path);
  DDP_CHECK(in.good(), "bucket_sim: cannot read ", path);
  std::vector<Json> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j = Json::parse(line, nullptr, false);
    DDP_CHECK(!j.is_discarded(), "bucket_sim: ", path, " line ", n,
              " is not JSON (expected one record a line)");
    if (j.value("kind", "") == kind) out.push_back(std::move(j));
  }
  return out;
}

double med(const Json& rec, const char* key) { return rec.at(key).at("median").get<double>(); }

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Repeated runs of one (config, world, mode, cap, first-bucket cap) - tools/bench.sh and tools/sweep.sh make
// several passes - become one record whose medians are the medians of the runs' medians.
std::vector<Json> merge_repeats(const std::vector<Json>& recs) {
  using Key = std::tuple<std::string, int, std::string, double, double>;
  std::map<Key, std::vector<const Json*>> groups;
  std::vector<Key> order;
  for (auto& r : recs) {
    auto key = std::make_tuple(r["config"].get<std::string>(), r["world"].get<int>(),
                               r["mode"].get<std::string>(), r["bucket_cap_mb"].get<double>(),
                               r.value("first_bucket_mb", 1.0));
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&r);
  }
  std::vector<Json> out;
  for (auto& key : order) {
    const auto& runs = groups[key];
    Json m = *runs.back();
    m["runs"] = runs.size();
    for (const char* k : {"step_s", "forward_s", "backward_s", "backward_compute_s", "communication_s",
                          "exposed_communication_s", "optimizer_s"}) {
      std::vector<double> v;
      for (auto* r : runs) v.push_back(med(*r, k));
      m[k]["median"] = median_of(v);
    }
    out.push_back(std::move(m));
  }
  return out;
}

struct ValidationRow {
  std::string config, mode;
  int world;
  double cap, first_cap, measured, predicted, err_pct, exposed_meas, exposed_pred;
  double predicted_iso, err_iso_pct;  // with the isolated all-reduce fit
  size_t buckets_meas, buckets_pred;
};

int64_t total_bytes(const std::vector<SimParam>& params) {
  int64_t n = 0;
  for (auto& p : params) n += p.bytes;
  return n;
}

// The in-training network of each world size: fit_in_training_network over that world's nooverlap records.
// A world whose records cannot be fitted (fewer than two models, ...) is left out with a note on stderr.
std::map<int, NetworkModel> in_training_networks(const std::vector<Json>& recs,
                                                 std::map<std::string, std::vector<SimParam>>& params_of,
                                                 const SimOptions& base) {
  std::map<int, std::vector<ExposedCommunication>> runs;
  for (auto& r : recs) {
    if (r["mode"] != "nooverlap" || r["world"].get<int>() < 2) continue;
    const std::string config = r["config"];
    if (!params_of.count(config)) params_of[config] = sim_params_from_shapes(model_shapes(config));
    runs[r["world"].get<int>()].push_back({config + " nooverlap", r.value("buckets", 0),
                                           static_cast<double>(total_bytes(params_of[config])),
                                           med(r, "exposed_communication_s")});
  }
  std::map<int, NetworkModel> out;
  for (auto& [world, rs] : runs) {
    try {
      out[world] = fit_in_training_network(rs, world, base.network.algorithm, base.copy_bytes_per_s);
    } catch (const ddp::Error& e) {
      std::fprintf(stderr, "bucket_sim: no in-training network for world %d: %s\n", world,
                   ddp::log::for_user(e.what()).c_str());
    }
  }
  return out;
}

// network_choice: "in-training" (fitted from the file's nooverlap records; the isolated fit where none) or
// "isolated" (the all-reduce benchmark's fit in `base`). Both predictions are printed; the choice is judged.
// min_world: the smallest world whose records are predicted (1 with --validate-world-1: DDP at world 1 has
// no collectives, only the reducer's copies; 2 by default). network_source says where base.network came from.
int validate(const std::string& bench_json, const SimOptions& base, double max_err_pct, bool have_network,
             const std::string& network_source, const std::string& network_choice, int min_world,
             const std::string& out_json) {
  DDP_CHECK(have_network,
            "bucket_sim: --validate needs the network model: --network-json FILE (from "
            "bench_allreduce --json), --alpha-us and --bandwidth-gbps, or a cached calibration of the backend "
            "(tools/sweep.sh makes one; see --print-calibration-path)");
  auto recs = merge_repeats(read_records(bench_json, "e2e"));
  // Compute times per (config, world): the last nosync record; rank skew of
  // synchronized steps: the nooverlap record.
  std::map<std::pair<std::string, int>, Json> compute, synced;
  for (auto& r : recs) {
    if (r["mode"] == "nosync") compute[{r["config"].get<std::string>(), r["world"].get<int>()}] = r;
    if (r["mode"] == "nooverlap") synced[{r["config"].get<std::string>(), r["world"].get<int>()}] = r;
  }
  std::vector<ValidationRow> rows;
  std::map<std::string, std::vector<SimParam>> params_of;
  const auto in_training = in_training_networks(recs, params_of, base);
  std::map<int, std::string> network_used;  // per world, for the header and the JSON rows
  for (auto& r : recs) {
    const std::string mode = r["mode"], config = r["config"];
    const int world = r["world"];
    if (world < min_world || (mode != "ddp" && mode != "nooverlap")) continue;
    auto c = compute.find({config, world});
    if (c == compute.end()) continue;
    if (!params_of.count(config)) params_of[config] = sim_params_from_shapes(model_shapes(config));
    const auto& params = params_of[config];
    ComputeTimes ct{med(c->second, "forward_s"), med(c->second, "backward_s"), med(c->second, "optimizer_s")};
    // The nosync step is its slowest rank's; what the phases of rank 0 do not explain stays in the step.
    ct.other_s = std::max(0.0, med(c->second, "step_s") - ct.forward_s - ct.backward_s - ct.optimizer_s);
    SimOptions o = base;
    o.world = world;
    o.overlap = mode == "ddp";
    o.first_bucket_mb = r.value("first_bucket_mb", 1.0);
    // Gloo on CPU: the all-reduce is CPU work on the cores the ranks compute on (docs/simulator.md).
    if (o.comm_cpu_share < 0) o.comm_cpu_share = r.value("device", "cpu") == "cpu" ? 1.0 : 0.0;
    auto ready = estimate_ready_times(params, ct.backward_s);
    const double cap = r["bucket_cap_mb"].get<double>();
    auto res_iso = simulate_step(params, ready, cap, ct, o);
    auto fitted = in_training.find(world);
    const bool use_fitted = network_choice == "in-training" && fitted != in_training.end();
    if (use_fitted) {
      o.network = fitted->second;
      // Rank skew: the job's step is the slowest rank's, and once the ranks synchronize every step the
      // slower one sets the pace; the part of a synchronized step that rank 0's phases do not explain is
      // measured by this config's nooverlap run (the nosync run's ranks never wait for each other).
      auto s = synced.find({config, world});
      if (s != synced.end())
        ct.other_s = std::max(0.0, med(s->second, "step_s") - med(s->second, "forward_s") -
                                       med(s->second, "backward_s") - med(s->second, "optimizer_s"));
    }
    network_used[world] = (use_fitted ? "in-training " : "isolated ") + o.network.describe();
    auto res = use_fitted ? simulate_step(params, ready, cap, ct, o) : res_iso;
    ValidationRow v;
    v.config = config;
    v.mode = mode;
    v.world = world;
    v.cap = r["bucket_cap_mb"];
    v.first_cap = o.first_bucket_mb;
    v.measured = med(r, "step_s");
    v.predicted = res.step_s;
    v.err_pct = (v.predicted - v.measured) / v.measured * 100;
    v.predicted_iso = res_iso.step_s;
    v.err_iso_pct = (v.predicted_iso - v.measured) / v.measured * 100;
    v.exposed_meas = med(r, "exposed_communication_s");
    v.exposed_pred = res.exposed_s;
    v.buckets_meas = r.value("buckets", 0);
    v.buckets_pred = res.buckets.size();
    rows.push_back(v);
  }
  DDP_CHECK(!rows.empty(), "bucket_sim: ", bench_json,
            " has no world >= ", min_world, " ddp/nooverlap record with a nosync "
            "record of the same configuration and world to take compute times from");
  std::printf(
      "bucket simulator validation: %s; comm CPU share %s; compute from the nosync run of each config; "
      "medians over repeated runs\n",
      bench_json.c_str(),
      base.comm_cpu_share < 0 ? "auto (1 on cpu, 0 on cuda)" : std::to_string(base.comm_cpu_share).c_str());
  std::printf("  isolated network (%s): %s\n", network_source.c_str(), base.network.describe().c_str());
  for (auto& [world, m] : in_training)
    std::printf("  in-training network, world %d (fit to the nooverlap runs' exposed communication): %s\n",
                world, m.describe().c_str());
  for (auto& [world, d] : network_used)
    std::printf("  judged: world %d with the %s network%s\n", world, d.c_str(),
                d.rfind("in-training", 0) == 0
                    ? " and the rank skew (time beyond rank 0's phases) of each config's nooverlap run"
                    : "");
  std::printf("%-6s %5s %-10s %8s %8s %12s %12s %8s %12s %12s %12s %8s\n", "config", "world", "mode",
              "cap_MB", "buckets", "measured_ms", "predicted_ms", "error_%", "exposed_meas", "exposed_pred",
              "isolated_ms", "iso_err%");
  double worst = 0, worst_iso = 0;
  for (auto& v : rows) {
    char b[32];
    std::snprintf(b, sizeof b, "%zu/%zu", v.buckets_meas, v.buckets_pred);
    std::printf("%-6s %5d %-10s %8.3g %8s %12.2f %12.2f %+8.1f %12.2f %12.2f %12.2f %+8.1f\n",
                v.config.c_str(), v.world, v.mode.c_str(), v.cap, b, v.measured * 1e3, v.predicted * 1e3,
                v.err_pct, v.exposed_meas * 1e3, v.exposed_pred * 1e3, v.predicted_iso * 1e3, v.err_iso_pct);
    worst = std::max(worst, std::fabs(v.err_pct));
    worst_iso = std::max(worst_iso, std::fabs(v.err_iso_pct));
  }
  std::printf("worst |error| with the isolated network: %.1f%% (for information)\n", worst_iso);
  std::printf("worst |error| %.1f%% (limit %.0f%%): %s\n", worst, max_err_pct,
              worst <= max_err_pct ? "PASS" : "FAIL");
  if (!out_json.empty()) {
    std::ofstream out(out_json, std::ios::app);
    DDP_CHECK(out.good(), "bucket_sim: cannot open --validate-json file ", out_json, " for appending");
    for (auto& v : rows)
      out << Json{{"kind", "sim_validation"},
                  {"config", v.config},
                  {"world", v.world},
                  {"mode", v.mode},
                  {"bucket_cap_mb", v.cap},
                  {"first_bucket_mb", v.first_cap},
                  {"measured_s", v.measured},
                  {"predicted_s", v.predicted},
                  {"error_pct", v.err_pct},
                  {"exposed_measured_s", v.exposed_meas},
                  {"exposed_predicted_s", v.exposed_pred},
                  {"isolated_predicted_s", v.predicted_iso},
                  {"isolated_error_pct", v.err_iso_pct},
                  {"isolated_network", base.network.describe()},
                  {"network", network_used[v.world]}}
                 .dump()
          << "\n";
  }
  return worst <= max_err_pct ? 0 : 3;
}

// The backend bucket_sim plans for by default: what bench_e2e and train pick on this machine without a
// --backend (NCCL with a GPU, else shm on one host unless DDP_SHM=0 makes it Gloo).
std::string planning_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  if (ddp::cuda_device_count() > 0) return "nccl";
  return ddp::dist::shm_allowed_from_env() ? "shm" : "gloo";
}

std::string host_name() {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return host[0] ? host : "unknown-host";
}

// How to make the calibration bucket_sim looks for (one line, for the placeholder warning and --help).
std::string how_to_calibrate(const std::string& backend, const std::string& path) {
  return "calibrate it: tools/ddp bench --sweep (caches it), or bin/ddprun --standalone --nproc-per-node 2 "
         "bin/bench_allreduce --backend " +
         backend + " --registered --json " + path + "; or pass --network-json FILE, or --alpha-us and --bandwidth-gbps";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string model = "mlp", checkpoint, algorithm = "ring", network_json,
                caps_s = "0.25,0.5,1,2,4,8,16,25,50,100", trace_path, validate_json, validate_out,
                validate_network = "in-training", backend = "auto", calibration_dir;
    int world = 2, trace_rank = 0;
    // The placeholder network, used only when neither flags, --network-json nor a cached calibration of the
    // backend give one (and then said so): PyTorch's Gloo over loopback TCP, 2 ranks, on the 2-core development
    // machine (1 MiB in 4.3 ms, 25 MiB in 34 ms; docs/simulator.md) - not the backend that runs by default.
    double alpha_us = 1531, bandwidth_gbps = 0.847, forward_ms = 0, backward_ms = 0, optimizer_ms = 0,
           first_mb = 1.0, copy_gbps = 17, samples = 0, max_err = 20, comm_share = -1;
    bool overlap = true, verbose = false, validate_world_1 = false, print_calibration_path = false;
    ddp::cli::Parser p(
        "bucket_sim",
        "Predicts DDP step time and exposed communication for each bucket cap from a parameter "
        "list, gradient-ready times and an alpha-beta network model, and recommends a cap. "
        "See docs/simulator.md.");
    p.disable_local_rank();  // a planning tool: no launcher passes it a rank
    p.add_choice("model", &model, {"mlp", "gpt", "gpt2s"},
                 "built-in parameter list (bench_e2e's configurations)");
    p.add("checkpoint", &checkpoint,
          "take names/shapes/dtypes from this safetensors file instead of --model");
    p.add("world", &world, "number of ranks (1 .. thousands)");
    p.add_choice("algorithm", &algorithm, {"ring", "tree"}, "all-reduce cost formula");
    p.add("alpha-us", &alpha_us, "per-message latency alpha (microseconds)");
    p.add("bandwidth-gbps", &bandwidth_gbps, "link bandwidth B (GB/s, 1e9 bytes)");
    p.add("network-json", &network_json, "take alpha/B from the fit in a bench_allreduce --json file");
    p.add_choice("backend", &backend, {"auto", "shm", "gloo", "hier", "nccl"},
                 "backend whose cached calibration is the default network (auto: what runs here by default, "
                 "nccl with a GPU, else shm; gloo with DDP_SHM=0)");
    p.add("calibration-dir", &calibration_dir,
          "folder of cached bench_allreduce calibrations, allreduce-<backend>-<host>-w<world>.json (default "
          "$DDP_CALIBRATION_DIR, else runs/calibration)");
    p.add("print-calibration-path", &print_calibration_path,
          "print the calibration file bucket_sim looks for first (backend, this host, --world) and exit");
    p.add("forward-ms", &forward_ms, "forward + loss time per step");
    p.add("backward-ms", &backward_ms, "backward compute time per step (no communication)");
    p.add("optimizer-ms", &optimizer_ms, "optimizer time per step");
    p.add("trace", &trace_path,
          "take gradient-ready times (and backward time) from a bench_e2e --trace file");
    p.add("trace-rank", &trace_rank, "rank whose events --trace uses");
    p.add("caps", &caps_s, "comma-separated bucket caps to simulate (MiB)");
    p.add("first-bucket-mb", &first_mb, "cap of the first bucket (MiB)");
    p.add("copy-gbps", &copy_gbps, "gradient copy bandwidth (GB/s) into buckets and back; 0: free");
    p.add("comm-cpu-share", &comm_share,
          "fraction of a core an all-reduce takes from backward while overlapped (0..1; -1: 0, or with "
          "--validate 1 for CPU records and 0 for CUDA ones)");
    p.add("overlap", &overlap, "launch buckets during backward (--no-overlap: after it)");
    p.add("samples-per-step", &samples,
          "global samples per step for the samples/s column (0: config default)");
    p.add("verbose", &verbose, "print the bucket timeline of the recommended cap");
    p.add("validate", &validate_json, "compare predictions with the bench_e2e records in FILE (JSON lines)");
    p.add("validate-json", &validate_out, "--validate also appends its rows to FILE as JSON lines");
    p.add_choice("validate-network", &validate_network, {"in-training", "isolated"},
                 "network --validate judges: fitted to the file's nooverlap runs (the loaded machine) or "
                 "the isolated all-reduce fit; both are printed");
    p.add("validate-world-1", &validate_world_1,
          "--validate also predicts world-1 ddp records (no collectives; compute from the world-1 nosync run)");
    p.add("max-error-pct", &max_err, "--validate fails (exit 3) when any |error| is above this");
    p.parse(argc, argv);
    if (world < 1) throw ddp::cli::UsageError("bucket_sim: --world must be >= 1");
    if (alpha_us < 0 || bandwidth_gbps <= 0)
      throw ddp::cli::UsageError("bucket_sim: --alpha-us must be >= 0 and --bandwidth-gbps > 0");

    SimOptions o;
    o.world = world;
    o.first_bucket_mb = first_mb;
    o.overlap = overlap;
    o.copy_bytes_per_s = copy_gbps * 1e9;
    if (comm_share > 1)
      throw ddp::cli::UsageError("bucket_sim: --comm-cpu-share must be in [0, 1] (or -1: auto)");
    o.comm_cpu_share = comm_share;
    o.network.algorithm = parse_algorithm(algorithm);
    o.network.alpha_s = alpha_us * 1e-6;
    o.network.bandwidth_bytes_per_s = bandwidth_gbps * 1e9;
    // The network: --network-json, else the flags, else the cached calibration of the backend in use, else the
    // placeholder - each stated in the output.
    if (calibration_dir.empty()) calibration_dir = default_calibration_dir();
    const std::string plan_backend = planning_backend(backend), host = host_name();
    const std::string cache_path =
        (std::filesystem::path(calibration_dir) / calibration_file_name(plan_backend, host, world)).string();
    if (print_calibration_path) {
      std::printf("%s\n", cache_path.c_str());
      return 0;
    }
    bool have_network = p.given("alpha-us") || p.given("bandwidth-gbps");
    std::string network_source = "given by --alpha-us/--bandwidth-gbps";
    bool placeholder = false;
    if (!network_json.empty()) {
      int fit_world = 0;
      o.network = network_from_allreduce_json(network_json, world, &fit_world);
      network_source = "bench_allreduce fit in " + network_json + ", world " + std::to_string(fit_world);
      have_network = true;
    } else if (!have_network) {
      if (auto cached = find_calibration(calibration_dir, plan_backend, host, world)) {
        o.network = cached->network;
        network_source = "cached calibration " + cached->path + " (bench_allreduce, backend " + plan_backend +
                         ", host " + host + ", world " + std::to_string(cached->world) +
                         (cached->world == world ? "" : "; per-link alpha and B used for world " + std::to_string(world)) +
                         ")";
        have_network = true;
      } else {
        placeholder = true;
        network_source = "a PLACEHOLDER: PyTorch's Gloo over loopback TCP on a 2-core machine, not backend " +
                         plan_backend + " on this host; no " + cache_path;
      }
    }
    if (p.given("algorithm")) o.network.algorithm = parse_algorithm(algorithm);

    if (!validate_json.empty())
      return validate(validate_json, o, max_err, have_network, network_source, validate_network,
                      validate_world_1 ? 1 : 2, validate_out);

    if (o.comm_cpu_share < 0) o.comm_cpu_share = 0;
    auto shapes = checkpoint.empty() ? model_shapes(model) : checkpoint_shapes(checkpoint);
    auto params = sim_params_from_shapes(shapes);
    ComputeTimes ct{forward_ms * 1e-3, backward_ms * 1e-3, optimizer_ms * 1e-3};
    std::vector<double> ready;
    std::string ready_source;
    if (!trace_path.empty()) {
      std::vector<std::string> names;
      for (auto& s : shapes) names.push_back(s.name);
      auto m = ready_times_from_trace(ddp::trace::load_chrome_trace(trace_path), names, trace_rank);
      ready = m.ready_s;
      if (!p.given("backward-ms")) ct.backward_s = m.backward_s;
      ready_source = "measured (" + std::to_string(m.iterations) + " iterations of " + trace_path + ")";
    } else {
      DDP_CHECK(backward_ms > 0,
                "bucket_sim: give --backward-ms (backward compute per step, e.g. from bench_e2e "
                "--mode nosync) or --trace FILE");
      ready = estimate_ready_times(params, ct.backward_s);
      ready_source = "estimated (backward time shared by parameter cost, reverse registration order)";
    }
    if (samples <= 0 && checkpoint.empty()) samples = static_cast<double>(default_batch(model) * world);

    auto results = sweep_caps(params, ready, parse_caps(caps_s), ct, o);
    const size_t best = recommend_cap(results);
    int64_t total = 0;
    for (auto& q : params) total += q.bytes;
    std::printf("bucket_sim: %s, %zu parameters, %.2f MiB of gradients, world %d\n",
                checkpoint.empty() ? model.c_str() : checkpoint.c_str(), params.size(),
                static_cast<double>(total) / (1 << 20), world);
    std::printf("  network %s (%s)\n", o.network.describe().c_str(), network_source.c_str());
    std::printf("  copies %.3g GB/s; comm CPU share %.2f; overlap %s; first bucket %.3g MiB\n", copy_gbps,
                o.comm_cpu_share, overlap ? "on" : "off", first_mb);
    std::printf("  compute: forward %.3f ms, backward %.3f ms, optimizer %.3f ms; ready times %s\n",
                ct.forward_s * 1e3, ct.backward_s * 1e3, ct.optimizer_s * 1e3, ready_source.c_str());
    std::fputs(format_sweep(results, best, samples).c_str(), stdout);
    std::printf("recommended bucket cap: %.3g MiB (predicted step %.3f ms, exposed communication %.3f ms)\n",
                results[best].cap_mb, results[best].step_s * 1e3, results[best].exposed_s * 1e3);
    if (placeholder)
      std::printf("warning: the network above is a placeholder, so this recommendation is not for backend %s on "
                  "this host; %s\n",
                  plan_backend.c_str(), how_to_calibrate(plan_backend, cache_path).c_str());
    if (verbose) {
      std::printf("timeline at %.3g MiB (ms since backward start; backward ends at %.3f):\n",
                  results[best].cap_mb, results[best].backward_end_s * 1e3);
      for (auto& b : results[best].buckets)
        std::printf("  bucket %zu: %zu params, %.3f MiB, ready %.3f, launch %.3f, start %.3f, end %.3f\n",
                    b.index, b.params.size(), static_cast<double>(b.bytes) / (1 << 20), b.ready_s * 1e3,
                    b.launch_s * 1e3, b.start_s * 1e3, b.end_s * 1e3);
    }
    return 0;
  } catch (const ddp::cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", ddp::log::for_user(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", ddp::log::error_line("bucket_sim", e.what()).c_str());
    return 1;
  }
}
