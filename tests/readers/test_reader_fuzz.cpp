// test_reader_fuzz.cpp - every reader of a file the program did not write just now, fed a seeded corpus of
// damaged copies of a valid file that the program's own writer made (mutations.h: truncations, bit flips,
// random bytes, hostile numbers and wrong types in every JSON value). Each case must load or be refused with
// a ddp::Error that names the file - never another exception (std::bad_alloc, a JSON library's type error),
// a crash, a request for more than kAllocationCap bytes at once (operator new is replaced below and refuses
// it), or more than a second. The readers: flight recorder dumps (group and process records, through the
// whole ddp_flight pipeline), safetensors checkpoints, training checkpoints (with the config check), train's
// configuration, the checkpoint folder's `latest`, the bucket simulator's calibration cache, Chrome traces
// (trace_summary's analysis and the merge), ddprun's worker error files, IDX datasets (plain and gzip) and
// text datasets. The tests/fuzz harnesses (libFuzzer) go further on two of them; this corpus runs in CI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "models/make_model.h"
#include "models/train.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/config_match.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/training_checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/data/gzip_file.h"
#include "runtime/data/idx.h"
#include "runtime/data/text_dataset.h"
#include "runtime/distributed/flight_analysis.h"
#include "runtime/distributed/flight_dump_reader.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/flight_report.h"
#include "runtime/launch/error_file.h"
#include "runtime/nn/layers.h"
#include "runtime/optim/optimizer.h"
#include "runtime/sim/calibration_cache.h"
#include "runtime/trace/trace.h"
#include "runtime/trace/trace_analysis.h"
#include "tests/readers/mutations.h"

// ---- one allocation may ask for at most kAllocationCap bytes while a case runs ----------------------------
namespace {
constexpr size_t kAllocationCap = size_t{256} << 20;
std::atomic<bool> g_capped{false};
std::atomic<size_t> g_refused{0};  // the size of the last refused request
}  // namespace

void* operator new(std::size_t n) {
  if (g_capped.load(std::memory_order_relaxed) && n > kAllocationCap) {
    g_refused.store(n, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace ddp::testing::fuzz {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void put(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// In memory when the machine has /dev/shm: thousands of small files written on a disk took 5x longer.
fs::path scratch(const std::string& name) {
  std::error_code ec;
  const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  fs::path d = base / ("ddp_reader_fuzz_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A reader: the valid file its program writes, where that file goes, and what the program does with it.
struct Reader {
  std::string name;
  std::string file_name;  // in the reader's folder; errors must name it
  std::function<std::string(const fs::path& dir)> valid;
  std::function<void(const fs::path& file)> read;
  // The JSON the file holds and how to write an edited one back; nullptr when it holds none.
  std::function<std::unique_ptr<JsonPart>(const std::string& valid)> json;
  // More mutations of this format (huge counts in a binary header); may be empty.
  std::function<std::vector<Mutation>(const std::string& valid)> extra;
};

// The whole file is one JSON document.
std::unique_ptr<JsonPart> whole_json(const std::string& v) {
  auto p = std::make_unique<JsonPart>();
  p->doc = ojson::parse(v);
  p->wrap = [](const std::string& j) { return j; };
  return p;
}
std::unique_ptr<JsonPart> no_json(const std::string&) { return nullptr; }

// ---- the valid files, as the programs write them -------------------------------------------------------

// A rank's group record of 20 collectives (the last one still waiting) in a 16-entry ring.
std::string flight_record(int rank, const std::string& group) {
  dist::FlightRecorder rec("shm", rank, 2, 16, "");
  rec.set_group_name(group);
  for (uint64_t s = 0; s < 20; ++s) {
    dist::FlightIssuer who("ddp bucket", static_cast<int>(s % 4), 4096, "fc1.weight .. fc1.bias");
    dist::CollectiveDesc d;
    d.kind = dist::CollectiveKind::Allreduce;
    d.seq = s;
    d.count = 1024;
    rec.issued(d);
    rec.started(s);
    if (s + 1 < 20) rec.completed(s);
  }
  return rec.to_json("signal");
}

void read_flight(const std::vector<std::string>& paths) {
  const auto records = dist::flight::load_flight_dumps(paths);
  const auto analysis = dist::flight::analyze_flight(records);
  (void)dist::flight::format_flight_report(analysis, {});
  (void)dist::flight::flight_chrome_trace(records);
}

std::string safetensors_file() {
  static float w[6] = {1, 2, 3, 4, 5, 6};
  static int64_t step = 42;
  static uint8_t mask[3] = {1, 0, 1};
  const auto bytes = checkpoint::encode_safetensors({{"w", DType::F32, {2, 3}, w, sizeof w},
                                                     {"step", DType::I64, {}, &step, 8},
                                                     {"mask", DType::U8, {3}, mask, 3}},
                                                    {{"format", "pt"}});
  return std::string(bytes.begin(), bytes.end());
}

// The header of a safetensors file (8-byte little-endian length, JSON, data) as the part to edit.
std::unique_ptr<JsonPart> safetensors_json(const std::string& v) {
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(v[static_cast<size_t>(i)]);
  auto p = std::make_unique<JsonPart>();
  p->doc = ojson::parse(v.substr(8, len));
  const std::string data = v.substr(8 + len);
  p->wrap = [data](const std::string& j) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((j.size() >> (8 * i)) & 0xff);
    return out + j + data;
  };
  return p;
}

struct TinyModel : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  TinyModel() { fc = register_module("fc", std::make_shared<nn::Linear>(3, 2)); }
  Tensor forward(const Tensor& x) override { return fc->forward(x); }
};

std::string train_config() { return models::options_json(models::TrainOptions{}); }

std::string idx_file(uint32_t magic, std::vector<uint32_t> dims) {
  std::string out;
  auto be32 = [&](uint32_t v) {
    for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  be32(magic);
  size_t n = 1;
  for (uint32_t d : dims) {
    be32(d);
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(i % 10));
  return out;
}

// Each 4-byte word of an IDX header replaced by a huge or odd count.
std::vector<Mutation> idx_header_counts(const std::string& v) {
  std::vector<Mutation> out;
  for (size_t at = 0; at + 4 <= std::min<size_t>(v.size(), 16); at += 4)
    for (uint32_t word : {0xffffffffu, 0x7fffffffu, 0x80000000u, 0x00010000u, 0u}) {
      std::string b = v;
      for (int i = 0; i < 4; ++i)
        b[at + static_cast<size_t>(i)] = static_cast<char>((word >> (8 * (3 - i))) & 0xff);
      char what[64];
      std::snprintf(what, sizeof what, "header word at %zu = 0x%08x", at, word);
      out.push_back({what, b});
    }
  return out;
}

std::string chrome_trace() {
  trace::Tracer t;
  t.set_rank(0);
  t.set_world_size(2);
  t.set_enabled(true);
  constexpr int64_t us = 1000;
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t b = 1000 + 100 * i;
    t.complete("iteration " + std::to_string(i + 1), "iteration", trace::kIterationLane, b * us,
               (b + 100) * us, {{"iteration", i + 1}});
    t.complete("op", "forward", trace::kComputeLane, b * us, (b + 20) * us);
    t.complete("op", "backward", trace::kComputeLane, (b + 20) * us, (b + 60) * us);
    t.complete("allreduce bucket 0", "comm", trace::kCommLane, (b + 30) * us, (b + 80) * us,
               {{"bucket", 0}, {"bytes", 4096}});
  }
  return t.chrome_trace_json();
}

std::vector<Reader> readers() {
  std::vector<Reader> r;
  r.push_back({"flight group record", "flight.rank0.json",
               [](const fs::path& dir) {
                 put(dir / "flight.rank1.json", flight_record(1, "pg0"));
                 return flight_record(0, "pg0");
               },
               [](const fs::path& f) {
                 read_flight({f.string(), (f.parent_path() / "flight.rank1.json").string()});
               },
               whole_json, nullptr});
  r.push_back({"flight process record", "process.json",
               [](const fs::path& dir) {
                 dist::FlightRecorder a("shm", 0, 2, 4, ""), b("gloo", 0, 2, 4, "");
                 a.set_group_name("pg0");
                 b.set_group_name("gather");
                 for (auto* rec : {&a, &b})
                   for (uint64_t s = 0; s < 6; ++s) {
                     dist::CollectiveDesc d;
                     d.kind = dist::CollectiveKind::Allgather;
                     d.seq = s;
                     d.count = 8;
                     rec->issued(d);
                     if (s < 5) rec->completed(s);
                   }
                 dist::dump_flight_record((dir / "seed.json").string());
                 return file_bytes(dir / "seed.json");
               },
               [](const fs::path& f) { read_flight({f.string()}); }, whole_json, nullptr});
  r.push_back(
      {"safetensors checkpoint", "ckpt.safetensors", [](const fs::path&) { return safetensors_file(); },
       [](const fs::path& f) { (void)checkpoint::read_safetensors(f.string()); }, safetensors_json, nullptr});
  r.push_back({"training checkpoint", "ckpt-step3.safetensors",
               [](const fs::path& dir) {
                 nn::manual_seed(1);
                 TinyModel m;
                 optim::SGD opt(m.named_parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
                 checkpoint::TrainingState st;
                 st.step = 3;
                 st.config_json = train_config();
                 checkpoint::save_training_checkpoint((dir / "seed.safetensors").string(), m, &opt, st);
                 return file_bytes(dir / "seed.safetensors");
               },
               [](const fs::path& f) {
                 TinyModel m;
                 optim::SGD opt(m.named_parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
                 checkpoint::LoadOptions lo;
                 lo.live_config = train_config();
                 (void)checkpoint::load_training_checkpoint(f.string(), m, &opt, lo);
               },
               safetensors_json, nullptr});
  r.push_back({"train configuration", "config.json", [](const fs::path&) { return train_config(); },
               [](const fs::path& f) {
                 const std::string text = file_bytes(f);
                 (void)models::options_from_json(text, f.string());
                 (void)checkpoint::compare_configs(text, train_config(), f.string());
               },
               whole_json, nullptr});
  r.push_back({"checkpoint folder's latest", "latest",
               [](const fs::path&) { return std::string("ckpt-step3.safetensors\n"); },
               [](const fs::path& f) { (void)checkpoint::read_latest(f.parent_path().string()); }, no_json,
               nullptr});
  r.push_back({"calibration cache", "allreduce-shm-node1-w2.json",
               [](const fs::path&) {
                 return std::string(
                     "{\"kind\":\"allreduce\",\"backend\":\"shm\",\"world\":2,\"points\":[{\"bytes\":4096,"
                     "\"seconds\":1e-05}],\"fit\":{\"algorithm\":\"ring\",\"alpha_s\":1e-05,"
                     "\"bandwidth_bytes_per_s\":2000000000.0}}\n");
               },
               [](const fs::path& f) {
                 (void)sim::network_from_allreduce_json(f.string(), 2);
                 (void)sim::find_calibration(f.parent_path().string(), "shm", "node1", 4);
               },
               [](const std::string& v) {
                 auto p = std::make_unique<JsonPart>();
                 p->doc = ojson::parse(v);
                 p->wrap = [](const std::string& j) { return j + "\n"; };
                 return p;
               },
               nullptr});
  r.push_back({"chrome trace (trace_summary)", "trace.json", [](const fs::path&) { return chrome_trace(); },
               [](const fs::path& f) {
                 const auto t = trace::load_chrome_trace(f.string());
                 (void)trace::format_summary(trace::analyze_trace(t));
               },
               whole_json, nullptr});
  r.push_back({"chrome trace (merge)", "trace.rank0.json", [](const fs::path&) { return chrome_trace(); },
               [](const fs::path& f) {
                 trace::merge_chrome_traces({f.string()}, (f.parent_path() / "merged.out").string());
               },
               whole_json, nullptr});
  r.push_back({"ddprun worker error file", "error.json",
               [](const fs::path& dir) {
                 launch::write_error_file((dir / "seed.json").string(), "train: step 3: loss is nan");
                 return file_bytes(dir / "seed.json");
               },
               [](const fs::path& f) { (void)launch::read_error_file(f.string()); }, whole_json, nullptr});
  r.push_back({"idx labels", "labels-idx1-ubyte",
               [](const fs::path&) { return idx_file(data::kIdxLabelsMagic, {10}); },
               [](const fs::path& f) { (void)data::read_idx(f.string(), data::kIdxLabelsMagic, ""); },
               no_json, idx_header_counts});
  r.push_back({"idx images", "images-idx3-ubyte",
               [](const fs::path&) {
                 return idx_file(data::kIdxImagesMagic, {2, 4, 4});
               },
               [](const fs::path& f) { (void)data::read_idx(f.string(), data::kIdxImagesMagic, ""); },
               no_json, idx_header_counts});
  r.push_back({"idx images (gzip)", "images-idx3-ubyte.gz",
               [](const fs::path& dir) {
                 const std::string raw = idx_file(data::kIdxImagesMagic, {2, 4, 4});
                 data::write_gzip_file((dir / "seed.gz").string(),
                                       std::vector<uint8_t>(raw.begin(), raw.end()));
                 return file_bytes(dir / "seed.gz");
               },
               [](const fs::path& f) { (void)data::read_idx(f.string(), data::kIdxImagesMagic, ""); },
               no_json, nullptr});
  r.push_back({"text dataset", "book.txt",
               [](const fs::path&) {
                 std::string s;
                 for (int i = 0; i < 40; ++i) s += "Call me Ishmael. Some years ago - never mind how long.\n";
                 return s;
               },
               [](const fs::path& f) { (void)data::load_text_datasets(f.string(), 8); }, no_json, nullptr});
  return r;
}

class ReaderFuzz : public ::testing::TestWithParam<size_t> {};

TEST_P(ReaderFuzz, EveryDamagedFileLoadsOrIsANamedError) {
  log::set_level(log::Level::Error);
  const Reader reader = readers()[GetParam()];
  const fs::path dir = scratch(std::to_string(GetParam()));
  const std::string valid = reader.valid(dir);
  const fs::path file = dir / reader.file_name;
  // The valid file loads.
  put(file, valid);
  ASSERT_NO_THROW(reader.read(file)) << reader.name;
  const auto part = reader.json(valid);
  std::vector<Mutation> cases = corpus(valid, 20261203u + static_cast<uint32_t>(GetParam()), part.get());
  if (reader.extra)
    for (auto& m : reader.extra(valid)) cases.push_back(std::move(m));
  const auto t0 = std::chrono::steady_clock::now();
  size_t refused = 0, loaded = 0, failures = 0;
  for (const Mutation& m : cases) {
    put(file, m.bytes);
    std::string problem;
    const auto c0 = std::chrono::steady_clock::now();
    g_capped = true;
    try {
      reader.read(file);
      ++loaded;
    } catch (const ddp::Error& e) {
      ++refused;
      const std::string what = e.what();
      if (what.find(reader.file_name) == std::string::npos)
        problem = "its error does not name the file: " + what.substr(0, 400);
      else if (what.size() > 4096)
        problem = "its error is " + std::to_string(what.size()) + " characters long";
    } catch (const std::bad_alloc&) {
      problem = "std::bad_alloc (a request of " + std::to_string(g_refused.load()) + " bytes)";
    } catch (const std::exception& e) {
      problem = std::string("an exception that is not ddp::Error: ") + e.what();
    } catch (...) {
      problem = "an unknown exception";
    }
    g_capped = false;
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    if (problem.empty() && took > 1.0) problem = "took " + std::to_string(took) + " s";
    if (!problem.empty() && ++failures <= 8)
      ADD_FAILURE() << reader.name << ", " << m.what << ": " << problem;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("cases", static_cast<int>(cases.size()));
  std::printf("[ reader ] %s: %zu cases (%zu loaded, %zu refused by name, %zu wrong) in %.2f s\n",
              reader.name.c_str(), cases.size(), loaded, refused, failures, seconds);
  EXPECT_EQ(failures, 0u) << reader.name;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Readers, ReaderFuzz, ::testing::Range<size_t>(0, readers().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           std::string n = readers()[i.param].name;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace ddp::testing::fuzz
