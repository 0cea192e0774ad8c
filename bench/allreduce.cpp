// allreduce.cpp - bench_allreduce: an nccl-tests-like all-reduce table over ddp.cpp's process group
// (Gloo on CPU, NCCL on GPU): per message size the median time and its spread, algbw = bytes / time and
// busbw = algbw * 2(n-1)/n (comparable to the link bandwidth whatever the rank count), and a correctness
// check (#wrong). Ends with the least-squares ring alpha-beta fit that calibrates the bucket simulator.
//
//   bin/ddprun --standalone --nproc-per-node 2 bin/bench_allreduce --max-bytes 64M --json runs/net.json
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/cli.h"
#include "runtime/dist/init.h"
#include "runtime/sim/network_model.h"
#include "runtime/sim/sample_stats.h"
#include "runtime/tensor/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;

// "4096", "64K", "1M", "2G" (binary multiples) -> bytes.
int64_t parse_size(const std::string& s) {
  DDP_CHECK(!s.empty(), "bench_allreduce: empty size; give bytes like 4096, 64K or 32M");
  int64_t mult = 1;
  std::string digits = s;
  switch (s.back()) {
    case 'K':
    case 'k':
      mult = 1 << 10;
      digits.pop_back();
      break;
    case 'M':
    case 'm':
      mult = 1 << 20;
      digits.pop_back();
      break;
    case 'G':
    case 'g':
      mult = int64_t{1} << 30;
      digits.pop_back();
      break;
    default:
      break;
  }
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(digits, &used);
  } catch (...) {
    used = 0;
  }
  DDP_CHECK(used == digits.size() && v > 0, "bench_allreduce: size '", s,
            "' is not a positive number of bytes (examples: 4096, 64K, 32M)");
  return v * mult;
}

// Blocks the host until the buffer's device finished everything queued on the current stream.
void wait_device(const ddp::Tensor& t) {
  if (t.device().is_cuda()) (void)t.slice0(0, 1).to(ddp::Device::cpu());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string min_s = "4K", max_s = "32M", backend = "auto", device_s = "auto", json_path;
    int factor = 4, iters = 10, warmup = 3;
    ddp::cli::Parser p(
        "bench_allreduce",
        "All-reduce (sum, float32) timing table over ddp.cpp's process group: time, algbw, busbw, "
        "correctness, and the ring alpha-beta fit for bucket_sim. Run under ddprun for world > 1.");
    p.add("min-bytes", &min_s, "smallest message (bytes; K/M/G suffixes)");
    p.add("max-bytes", &max_s, "largest message");
    p.add("factor", &factor, "size multiplier between rows (>= 2)");
    p.add("iters", &iters, "timed all-reduces per size");
    p.add("warmup", &warmup, "untimed all-reduces per size");
    p.add_choice("backend", &backend, {"auto", "gloo", "nccl"}, "process group backend");
    p.add_choice("device", &device_s, {"auto", "cpu", "cuda"}, "buffer device (auto: cuda with nccl)");
    p.add("json", &json_path, "append one JSON record (points and fit) to this file (rank 0)");
    p.parse(argc, argv);
    const int64_t min_bytes = parse_size(min_s), max_bytes = parse_size(max_s);
    DDP_CHECK(min_bytes <= max_bytes, "bench_allreduce: --min-bytes (", min_bytes, ") > --max-bytes (",
              max_bytes, ")");
    DDP_CHECK(factor >= 2, "bench_allreduce: --factor ", factor, " must be >= 2");
    DDP_CHECK(iters >= 1 && warmup >= 0, "bench_allreduce: --iters must be >= 1 and --warmup >= 0");

    auto ctx = ddp::dist::init_distributed(ddp::dist::init_from_env(), backend);
    auto& pg = *ctx.group;
    const int rank = pg.rank(), world = pg.size();
    const std::string resolved = pg.backend_name();
    ddp::Device dev = ddp::Device::cpu();
    if (device_s == "cuda" || (device_s == "auto" && resolved == "nccl"))
      dev = ddp::Device::cuda(ddp::dist::select_cuda_device(ctx.env.local_rank));

    if (rank == 0) {
      std::printf("# bench_allreduce: backend %s, world %d, device %s, float32 sum, %d iters (+%d warmup)\n",
                  resolved.c_str(), world, dev.str().c_str(), iters, warmup);
      std::printf("# %12s %12s %12s %12s %12s %10s %10s %7s\n", "size(B)", "count", "time(us)", "p10(us)",
                  "p90(us)", "algbw", "busbw", "#wrong");
      std::printf("# %12s %12s %12s %12s %12s %10s %10s %7s\n", "", "", "median", "", "", "(GB/s)", "(GB/s)",
                  "");
    }
    std::vector<ddp::sim::MeasuredAllreduce> points;
    nlohmann::ordered_json rows = nlohmann::json::array();
    double busbw_sum = 0;
    int rows_n = 0;
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
      const int64_t count = std::max<int64_t>(1, bytes / 4);
      ddp::Tensor buf = ddp::Tensor::full({count}, 1.0, ddp::DType::F32, dev);
      ddp::dist::CommBuffer cb{buf.raw_data(), buf.numel(), buf.dtype(), buf.device(), buf.storage()};
      pg.barrier()->wait();
      for (int i = 0; i < warmup; ++i) pg.allreduce(cb)->wait();
      wait_device(buf);
      std::vector<double> times;
      for (int i = 0; i < iters; ++i) {
        pg.barrier()->wait();
        const auto t0 = Clock::now();
        pg.allreduce(cb)->wait();
        wait_device(buf);
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      // Correctness: rank r contributes r + 1 everywhere; the sum is n(n+1)/2.
      buf.fill_(rank + 1.0);
      pg.allreduce(cb)->wait();
      const double expect = world * (world + 1) / 2.0;
      int64_t wrong = 0;
      for (double v : buf.to_double_vector())
        if (v != expect) ++wrong;
      // Every rank's median goes to rank 0 through one all-reduce (max): the slowest rank's view.
      auto st = ddp::sim::summarize(times);
      ddp::Tensor med = ddp::Tensor::from_data<double>({st.median, static_cast<double>(wrong)}, {2});
      ddp::dist::CommBuffer mb{med.raw_data(), med.numel(), med.dtype(), med.device(), med.storage()};
      pg.allreduce(mb, ddp::dist::ReduceOp::Max)->wait();
      const double t = med.data<double>()[0];
      const int64_t wrong_any = static_cast<int64_t>(med.data<double>()[1]);
      const double real_bytes = static_cast<double>(count) * 4;
      const double algbw = real_bytes / t / 1e9;
      const double busbw = algbw * (world > 1 ? 2.0 * (world - 1) / world : 1.0);
      busbw_sum += busbw;
      ++rows_n;
      points.push_back({real_bytes, t});
      if (rank == 0) {
        std::printf("  %12.0f %12" PRId64 " %12.1f %12.1f %12.1f %10.3f %10.3f %7" PRId64 "\n", real_bytes,
                    count, t * 1e6, st.p10 * 1e6, st.p90 * 1e6, algbw, busbw, wrong_any);
        rows.push_back({{"bytes", real_bytes},
                        {"median_s", t},
                        {"p10_s", st.p10},
                        {"p90_s", st.p90},
                        {"algbw_gbps", algbw},
                        {"busbw_gbps", busbw},
                        {"wrong", wrong_any}});
      }
      if (bytes > max_bytes / factor) break;  // next size would overflow the range
    }
    if (rank == 0) {
      std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_sum / std::max(rows_n, 1));
      nlohmann::ordered_json rec = {{"kind", "allreduce"}, {"backend", resolved}, {"world", world},
                                    {"device", dev.str()}, {"iters", iters},      {"points", rows}};
      if (world > 1 && points.size() >= 2) {
        auto fit = ddp::sim::fit_network_model(points, world, ddp::sim::AllreduceAlgorithm::Ring);
        std::printf("# ring fit: %s\n", fit.describe().c_str());
        rec["fit"] = {{"algorithm", "ring"},
                      {"alpha_s", fit.alpha_s},
                      {"bandwidth_bytes_per_s", fit.bandwidth_bytes_per_s}};
      }
      if (!json_path.empty()) {
        std::ofstream out(json_path, std::ios::app);
        DDP_CHECK(out.good(), "bench_allreduce: cannot open --json file ", json_path, " for appending");
        out << rec.dump() << "\n";
      }
    }
    pg.barrier()->wait();
    return 0;
  } catch (const ddp::cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 1;
  }
}
