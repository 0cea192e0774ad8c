// allreduce.cpp - bench_allreduce: an nccl-tests-like all-reduce table over ddp.cpp's process groups
// (shm or Gloo on CPU, NCCL on GPU): per message size (from --min-bytes by --factor, ending at exactly
// --max-bytes) the median time (nccl-tests prints a mean; the table's header says so) and its spread,
// algbw = bytes / time and busbw = algbw * 2(n-1)/n (comparable to the link bandwidth whatever the rank
// count), and a correctness check (#wrong). Several backends in one run (--backend shm,gloo) are timed
// interleaved, iteration by iteration, beside each rank's single-thread memcpy bandwidth of the same size
// (the copy column), so ratios come from the same conditions on a shared machine. Ends with the least-squares
// ring alpha-beta fit that calibrates the bucket simulator (one per backend). --collective adds nccl-tests'
// reduce_scatter and all_gather tables (out of place, or --in-place): their size is the whole buffer
// (reduce-scatter's input, all-gather's output, world x the per-rank chunk, as nccl-tests counts it) and
// busbw = algbw * (n-1)/n.
//
//   bin/ddprun --standalone --nproc-per-node 2 bin/bench_allreduce --backend shm,gloo --max-bytes 64M
//   bin/ddprun --standalone --nproc-per-node 2 bin/bench_allreduce --backend shm,gloo --collective all
#include <cinttypes>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/core/terminal_text.h"
#include "runtime/distributed/comm_buffer_of.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/process_group_factory.h"
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

// "shm,gloo" -> {"shm", "gloo"}.
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// The collectives the tables time, by nccl-tests' names.
enum class Coll { Allreduce, ReduceScatter, AllGather };
const char* coll_name(Coll c) {
  return c == Coll::Allreduce ? "allreduce" : c == Coll::ReduceScatter ? "reduce_scatter" : "all_gather";
}
// "allreduce,reduce_scatter" or "all" -> the list, in the order given.
std::vector<Coll> parse_collectives(const std::string& s) {
  std::vector<Coll> out;
  for (const auto& name : split_list(s)) {
    if (name == "all") {
      out.insert(out.end(), {Coll::Allreduce, Coll::ReduceScatter, Coll::AllGather});
    } else if (name == "allreduce" || name == "all_reduce") {
      out.push_back(Coll::Allreduce);
    } else if (name == "reduce_scatter" || name == "reducescatter") {
      out.push_back(Coll::ReduceScatter);
    } else if (name == "all_gather" || name == "allgather") {
      out.push_back(Coll::AllGather);
    } else {
      DDP_FAIL("bench_allreduce: unknown collective '", name,
               "'; expected allreduce, reduce_scatter, all_gather or all (comma-separated)");
    }
  }
  DDP_CHECK(!out.empty(), "bench_allreduce: --collective is empty; give e.g. allreduce or all");
  return out;
}
// nccl-tests' bus bandwidth factor: all-reduce moves 2(n-1)/n of its bytes over each rank's link,
// reduce-scatter and all-gather (n-1)/n of the whole buffer. 1 at world 1, where nothing moves.
double busbw_factor(Coll c, int world) {
  if (world <= 1) return 1.0;
  const double f = static_cast<double>(world - 1) / world;
  return c == Coll::Allreduce ? 2.0 * f : f;
}

// One collective's buffers for one row: `whole` is all-reduce's buffer, reduce-scatter's input and
// all-gather's output (world x chunk); `part` this rank's chunk (reduce-scatter's output, all-gather's
// input): its own tensor, or with --in-place the chunk `rank` of `whole`.
struct RowBuffers {
  ddp::Tensor whole, part;
  ddp::dist::CommBuffer whole_cb, part_cb;
};

struct Timed {
  std::shared_ptr<ddp::dist::ProcessGroup> pg;
  std::string name;
  std::vector<ddp::sim::MeasuredAllreduce> points;
  nlohmann::ordered_json rows = nlohmann::json::array();
  double busbw_sum = 0;
  int rows_n = 0;
};

// The message sizes of the table: min_bytes, each next one `factor` times the last, and max_bytes itself as
// the last row where the multiples step over it (the defaults 4K * 4^k pass 32M between 16M and 64M).
std::vector<int64_t> row_sizes(int64_t min_bytes, int64_t max_bytes, int factor) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    sizes.push_back(bytes);
    if (bytes > max_bytes / factor) break;  // the next multiple would pass max_bytes (or overflow)
  }
  if (sizes.back() != max_bytes) sizes.push_back(max_bytes);
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string min_s = "4K", max_s = "32M", backend = "auto", device_s = "auto", json_path;
    int factor = 4, iters = 10, warmup = 3;
    bool registered = false, in_place = false;
    std::string collective_s = "allreduce";
    ddp::cli::Parser p(
        "bench_allreduce",
        "All-reduce (sum, float32) timing table over ddp.cpp's process groups: time, algbw, busbw, "
        "correctness, the single-thread copy bandwidth beside it, and the ring alpha-beta fit for "
        "bucket_sim; "
        "with --collective, reduce-scatter and all-gather tables too (nccl-tests' sizes and busbw). "
        "Run under ddprun for world > 1.");
    p.add("min-bytes", &min_s, "smallest message (bytes; K/M/G suffixes)");
    p.add("max-bytes", &max_s, "largest message");
    p.add("factor", &factor, "size multiplier between rows (>= 2)");
    p.add("iters", &iters, "timed all-reduces per size");
    p.add("warmup", &warmup, "untimed all-reduces per size");
    p.add("backend", &backend,
          "process group backend(s), comma-separated, timed interleaved: auto, cpu, shm, gloo, hier, nccl");
    p.add_choice("device", &device_s, {"auto", "cpu", "cuda"}, "buffer device (auto: cuda with nccl)");
    p.add("registered", &registered,
          "buffers from the first backend's allocate_comm_buffer (shm: registered shared memory, all-reduced "
          "in place above DDP_SHM_DIRECT_MIN_BYTES), as DDP's buckets are; else ordinary memory");
    p.add("collective", &collective_s,
          "collective(s), comma-separated, one table each: allreduce, reduce_scatter, all_gather, or all");
    p.add("in-place", &in_place,
          "reduce_scatter / all_gather in place: the output (reduce-scatter) or input (all-gather) is this "
          "rank's chunk of the whole buffer");
    p.add("json", &json_path, "append one JSON record (points and fit) per backend to this file (rank 0)");
    p.parse(argc, argv);
    const int64_t min_bytes = parse_size(min_s), max_bytes = parse_size(max_s);
    DDP_CHECK(min_bytes <= max_bytes, "bench_allreduce: --min-bytes (", min_bytes, ") > --max-bytes (",
              max_bytes, ")");
    DDP_CHECK(factor >= 2, "bench_allreduce: --factor ", factor, " must be >= 2");
    DDP_CHECK(iters >= 1 && warmup >= 0, "bench_allreduce: --iters must be >= 1 and --warmup >= 0");
    const std::vector<std::string> backends = split_list(backend);
    DDP_CHECK(!backends.empty(), "bench_allreduce: --backend is empty; give e.g. shm or shm,gloo");
    for (const auto& b : backends) ddp::dist::resolve_backend(b);  // a clear error for unknown names
    const std::vector<Coll> collectives = parse_collectives(collective_s);

    auto ctx = ddp::dist::init_distributed(ddp::dist::init_from_env(), backends[0]);
    std::vector<Timed> groups(backends.size());
    groups[0].pg = ctx.group;
    for (size_t i = 1; i < backends.size(); ++i)
      groups[i].pg = ddp::dist::new_process_group(ctx.env, ctx.store, backends[i]);
    for (auto& g : groups) g.name = g.pg->backend_name();
    auto& pg = *ctx.group;
    const int rank = pg.rank(), world = pg.size();
    ddp::Device dev = ddp::Device::cpu();
    if (device_s == "cuda" || (device_s == "auto" && groups[0].name == "nccl"))
      dev = ddp::Device::cuda(ddp::dist::select_cuda_device(ctx.env.local_rank));

    for (const Coll coll : collectives) {
      for (auto& g : groups) {
        g.points.clear();
        g.rows = nlohmann::json::array();
        g.busbw_sum = 0;
        g.rows_n = 0;
      }
      const bool ar = coll == Coll::Allreduce;
      const char* what = ar ? "all-reduces" : coll == Coll::ReduceScatter ? "reduce-scatters" : "all-gathers";
      if (rank == 0) {
        std::string names;
        for (auto& g : groups) names += (names.empty() ? "" : ", ") + g.name;
        if (ar) {
          std::printf(
              "# bench_allreduce: backend %s, world %d, device %s, float32 sum, %d iters (+%d warmup)%s\n",
              names.c_str(), world, dev.str().c_str(), iters, warmup,
              registered ? ", registered buffers" : "");
        } else {
          std::printf(
              "# bench_allreduce %s: backend %s, world %d, device %s, float32%s, %s, %d iters (+%d "
              "warmup)%s\n",
              coll_name(coll), names.c_str(), world, dev.str().c_str(),
              coll == Coll::ReduceScatter ? " sum" : "", in_place ? "in place" : "out of place", iters,
              warmup, registered ? ", registered buffers" : "");
          std::printf(
              "# size: the whole buffer (%s), count its float32 elements: world x the per-rank chunk, as "
              "nccl-tests counts it\n",
              coll == Coll::ReduceScatter ? "the input" : "the output");
        }
        std::printf(
            "# time: the median of the %d timed %s, the slowest rank's (nccl-tests prints a mean); "
            "p10/p90: their spread\n",
            iters, what);
        if (ar)
          std::printf(
              "# algbw = size / time; busbw = algbw * 2(n-1)/n with n = world %d (nccl-tests' all-reduce "
              "factor: comparable to the link bandwidth)\n",
              world);
        else
          std::printf(
              "# algbw = size / time; busbw = algbw * (n-1)/n with n = world %d (nccl-tests' %s factor: "
              "comparable to the link bandwidth)\n",
              world, coll_name(coll));
        std::printf(
            "# copy: one thread's memcpy of the same bytes on each rank, timed between the iterations\n");
        std::printf("# %12s %12s %8s %12s %12s %12s %10s %10s %7s %10s\n", "size(B)", "count", "backend",
                    "time(us)", "p10(us)", "p90(us)", "algbw", "busbw", "#wrong", "copy");
        std::printf("# %12s %12s %8s %12s %12s %12s %10s %10s %7s %10s\n", "", "", "", "median", "", "",
                    "(GB/s)", "(GB/s)", "", "(GB/s)");
      }
      for (const int64_t bytes : row_sizes(min_bytes, max_bytes, factor)) {
        // All-reduce: max(1, bytes / 4) floats. The others: whole chunks, at least one element per rank.
        const int64_t chunk = ar ? 0 : std::max<int64_t>(1, bytes / 4 / world);
        const int64_t count = ar ? std::max<int64_t>(1, bytes / 4) : chunk * world;
        auto make = [&](int64_t n) {
          return registered ? ddp::comm_tensor(*groups[0].pg, n, ddp::DType::F32, dev)
                            : ddp::Tensor::zeros({n}, ddp::DType::F32, dev);
        };
        RowBuffers rb;
        rb.whole = make(count);
        if (!ar) rb.part = in_place ? rb.whole.slice0(rank * chunk, (rank + 1) * chunk) : make(chunk);
        rb.whole.fill_(1.0);
        if (!ar && !in_place) rb.part.fill_(1.0);
        rb.whole_cb = ddp::comm_buffer_of(rb.whole);
        if (!ar) rb.part_cb = ddp::comm_buffer_of(rb.part);
        auto issue = [&](ddp::dist::ProcessGroup& g) {
          switch (coll) {
            case Coll::Allreduce:
              return g.allreduce(rb.whole_cb);
            case Coll::ReduceScatter:
              return g.reduce_scatter(rb.whole_cb, rb.part_cb);
            case Coll::AllGather:
              break;
          }
          return g.allgather(rb.part_cb, rb.whole_cb);
        };
        std::vector<char> copy_src(dev.is_cpu() ? static_cast<size_t>(count) * 4 : 0, 1),
            copy_dst(copy_src.size());
        for (auto& g : groups) {
          g.pg->barrier()->wait();
          for (int i = 0; i < warmup; ++i) issue(*g.pg)->wait();
        }
        wait_device(rb.whole);
        std::vector<std::vector<double>> times(groups.size());
        std::vector<double> copy_times;
        for (int i = 0; i < iters; ++i) {
          for (size_t k = 0; k < groups.size(); ++k) {
            groups[k].pg->barrier()->wait();
            const auto t0 = Clock::now();
            issue(*groups[k].pg)->wait();
            wait_device(rb.whole);
            times[k].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
          }
          if (!copy_src.empty()) {
            pg.barrier()->wait();  // all ranks copy at once, as they communicate at once
            const auto t0 = Clock::now();
            std::memcpy(copy_dst.data(), copy_src.data(), copy_src.size());
            copy_times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            copy_src[static_cast<size_t>(i) % copy_src.size()] ^= copy_dst[0];  // keep the copy observable
          }
        }
        const double copy_t = copy_times.empty() ? 0 : ddp::sim::summarize(copy_times).median;
        for (size_t k = 0; k < groups.size(); ++k) {
          auto& g = groups[k];
          // Correctness: rank r contributes r + 1 everywhere. All-reduce and reduce-scatter end with the sum
          // n(n+1)/2; all-gather with q + 1 in block q.
          int64_t wrong = 0;
          if (coll == Coll::AllGather) {
            rb.whole.fill_(0.0);
            rb.part.fill_(rank + 1.0);
            g.pg->allgather(rb.part_cb, rb.whole_cb)->wait();
            const auto v = rb.whole.to_double_vector();
            for (size_t i = 0; i < v.size(); ++i)
              if (v[i] != static_cast<double>(i / static_cast<size_t>(chunk) + 1)) ++wrong;
          } else {
            rb.whole.fill_(rank + 1.0);
            ddp::Tensor result = rb.whole;
            if (ar) {
              g.pg->allreduce(rb.whole_cb)->wait();
            } else {
              if (!in_place) rb.part.fill_(0.0);
              g.pg->reduce_scatter(rb.whole_cb, rb.part_cb)->wait();
              result = rb.part;
            }
            const double expect = world * (world + 1) / 2.0;
            for (double v : result.to_double_vector())
              if (v != expect) ++wrong;
          }
          // Every rank's medians go to rank 0 through one all-reduce (max): the slowest rank's view.
          auto st = ddp::sim::summarize(times[k]);
          ddp::Tensor med =
              ddp::Tensor::from_data<double>({st.median, static_cast<double>(wrong), copy_t}, {3});
          ddp::dist::CommBuffer mb{med.raw_data(), med.numel(), med.dtype(), med.device(), med.storage()};
          pg.allreduce(mb, ddp::dist::ReduceOp::Max)->wait();
          const double t = med.data<double>()[0];
          const int64_t wrong_any = static_cast<int64_t>(med.data<double>()[1]);
          const double copy_max = med.data<double>()[2];
          const double real_bytes = static_cast<double>(count) * 4;
          const double algbw = real_bytes / t / 1e9;
          const double busbw = algbw * busbw_factor(coll, world);
          const double copy_bw = copy_max > 0 ? real_bytes / copy_max / 1e9 : 0;
          g.busbw_sum += busbw;
          ++g.rows_n;
          g.points.push_back({real_bytes, t});
          if (rank == 0) {
            std::printf("  %12.0f %12" PRId64 " %8s %12.1f %12.1f %12.1f %10.3f %10.3f %7" PRId64 " %10.3f\n",
                        real_bytes, count, g.name.c_str(), t * 1e6, st.p10 * 1e6, st.p90 * 1e6, algbw, busbw,
                        wrong_any, copy_bw);
            g.rows.push_back({{"bytes", real_bytes},
                              {"count", count},
                              {"median_s", t},
                              {"p10_s", st.p10},
                              {"p90_s", st.p90},
                              {"algbw_gbps", algbw},
                              {"busbw_gbps", busbw},
                              {"wrong", wrong_any},
                              {"copy_gbps", copy_bw}});
          }
        }
        if (rank == 0 && groups.size() > 1) {
          // Ratios of the first backend to the others at this size (same run, interleaved).
          const auto& r0 = groups[0].rows.back();
          for (size_t k = 1; k < groups.size(); ++k)
            std::printf(
                "  # %s/%s algbw ratio at %.0f B: %.2fx; %s algbw / copy: %.0f%%\n", groups[0].name.c_str(),
                groups[k].name.c_str(), static_cast<double>(r0["bytes"]),
                static_cast<double>(r0["algbw_gbps"]) /
                    static_cast<double>(groups[k].rows.back()["algbw_gbps"]),
                groups[0].name.c_str(),
                static_cast<double>(r0["copy_gbps"]) > 0
                    ? 100.0 * static_cast<double>(r0["algbw_gbps"]) / static_cast<double>(r0["copy_gbps"])
                    : 0.0);
        }
      }
      if (rank == 0) {
        for (auto& g : groups) {
          std::printf("# %s%s%s: avg bus bandwidth %.3f GB/s\n", g.name.c_str(), ar ? "" : " ",
                      ar ? "" : coll_name(coll), g.busbw_sum / std::max(g.rows_n, 1));
          nlohmann::ordered_json rec = {{"kind", coll_name(coll)},  {"backend", g.name},   {"world", world},
                                        {"registered", registered}, {"device", dev.str()}, {"iters", iters}};
          if (!ar) rec["in_place"] = in_place;
          rec["points"] = g.rows;
          if (ar && world > 1 && g.points.size() >= 2) {
            auto fit = ddp::sim::fit_network_model(g.points, world, ddp::sim::AllreduceAlgorithm::Ring);
            std::printf("# %s ring fit: %s\n", g.name.c_str(), fit.describe().c_str());
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
      }
    }
    for (auto& g : groups) g.pg->barrier()->wait();
    return 0;
  } catch (const ddp::cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", ddp::log::for_user(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", ddp::log::error_line("bench_allreduce", e.what()).c_str());
    return 1;
  }
}
