// test_atomic_write.cpp - a writer killed (SIGKILL) or failing mid-file leaves the previous checkpoint whole
// and loadable; a failed write cleans up its temp file; errors name the path.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint_test_util.h"
#include "runtime/checkpoint/atomic_file.h"
#include "runtime/checkpoint/safetensors.h"

using namespace ddp;
using namespace ddp::checkpoint;
using namespace ddp::checkpoint::testing;

namespace {

std::vector<float> ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

}  // namespace

TEST(AtomicWrite, WriterKilledMidFileLeavesThePreviousCheckpointWhole) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  auto old_weights = ramp(1000, 0.0f);
  write_safetensors(path, {{"w", DType::F32, {1000}, old_weights.data(), 4000}}, {{"step", "100"}});
  const auto old_bytes = read_raw(path);

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const size_t big_floats = size_t{4} << 20;  // 16 MiB: many chunks
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    std::vector<float> big = ramp(big_floats, 7.0f);
    WriteOptions options;
    options.chunk_bytes = 64 << 10;
    options.on_progress = [&](uint64_t written) {
      if (written >= (1u << 20)) {  // 1 MiB on disk: tell the parent, then wait to be killed
        char c = 'k';
        if (::write(ready[1], &c, 1) != 1) ::_exit(3);
        for (;;) ::pause();
      }
    };
    try {
      write_safetensors(path,
                        {{"w", DType::F32, {static_cast<int64_t>(big_floats)}, big.data(), big_floats * 4}},
                        {{"step", "200"}}, options);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);  // not reached: the parent kills us first
  }
  ::close(ready[1]);
  pollfd pfd{ready[0], POLLIN, 0};
  int polled = ::poll(&pfd, 1, 20000);
  char c = 0;
  bool child_reported = polled == 1 && ::read(ready[0], &c, 1) == 1 && c == 'k';
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(ready[0]);
  ASSERT_TRUE(child_reported) << "the writer never reached 1 MiB (status " << status << ")";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // The half-written temp file is there (proof the kill happened mid-write) ...
  const std::string temp = path + ".tmp." + std::to_string(child);
  ASSERT_TRUE(std::filesystem::exists(temp));
  EXPECT_GE(std::filesystem::file_size(temp), 1u << 20);
  EXPECT_LT(std::filesystem::file_size(temp), big_floats * 4);
  // ... and the target is byte-identical to the previous checkpoint and loads.
  EXPECT_EQ(read_raw(path), old_bytes);
  auto back = read_safetensors(path);
  EXPECT_EQ(back.metadata.at("step"), "100");
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(std::memcmp(back.tensors[0].bytes.data(), old_weights.data(), 4000), 0);
  // The half-written temp file itself is rejected, never loaded as garbage.
  EXPECT_THROW(read_safetensors(temp), ddp::Error);

  // A later save succeeds and replaces the file.
  auto new_weights = ramp(10, 3.0f);
  write_safetensors(path, {{"w", DType::F32, {10}, new_weights.data(), 40}}, {{"step", "300"}});
  EXPECT_EQ(read_safetensors(path).metadata.at("step"), "300");
}

TEST(AtomicWrite, FailureMidWriteRemovesTheTempFileAndKeepsTheOldOne) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  auto w = ramp(100, 1.0f);
  write_safetensors(path, {{"w", DType::F32, {100}, w.data(), 400}});
  const auto old_bytes = read_raw(path);

  auto big = ramp(100000, 2.0f);
  WriteOptions options;
  options.chunk_bytes = 4096;
  options.on_progress = [](uint64_t written) {
    if (written > 20000) throw std::runtime_error("simulated failure");
  };
  EXPECT_THROW(write_safetensors(path, {{"w", DType::F32, {100000}, big.data(), 400000}}, {}, options),
               std::runtime_error);
  EXPECT_EQ(read_raw(path), old_bytes);
  EXPECT_FALSE(std::filesystem::exists(atomic_temp_path(path)));
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1u) << "only the checkpoint itself may remain";
}

TEST(AtomicWrite, MissingDirectoryIsNamedInTheError) {
  ScratchDir dir;
  const std::string path = dir.file("no/such/dir/model.safetensors");
  float x = 1;
  try {
    write_safetensors(path, {{"x", DType::F32, {}, &x, 4}});
    FAIL() << "writing into a missing directory succeeded";
  } catch (const ddp::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("saving '" + path + "': cannot create temp file"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  }
}

TEST(AtomicWrite, ProgressCountsEveryByte) {
  ScratchDir dir;
  const std::string path = dir.file("p.safetensors");
  auto w = ramp(5000, 0.0f);
  std::vector<uint64_t> seen;
  WriteOptions options;
  options.chunk_bytes = 3000;
  options.on_progress = [&](uint64_t n) { seen.push_back(n); };
  write_safetensors(path, {{"w", DType::F32, {5000}, w.data(), 20000}}, {}, options);
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.back(), std::filesystem::file_size(path));
  EXPECT_EQ(seen.size(), 1u + (20000 + 2999) / 3000);  // header, then one call per chunk
}
