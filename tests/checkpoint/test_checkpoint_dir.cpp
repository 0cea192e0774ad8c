// test_checkpoint_dir.cpp - the `latest` file of a checkpoint folder read strictly (missing, empty and
// pointing outside the folder are different errors), written atomically, and the temp files of interrupted
// saves removed when their writer is gone.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint_test_util.h"
#include "runtime/checkpoint/checkpoint_dir.h"

using namespace ddp;
using namespace ddp::checkpoint;
using namespace ddp::checkpoint::testing;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_text(const std::string& path, const std::string& text) {
  write_raw(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// A pid that belonged to a process which has exited and been reaped.
pid_t dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

}  // namespace

TEST(CheckpointDir, LatestIsWrittenAtomicallyAndReadBack) {
  ScratchDir dir;
  write_latest(dir.path(), "ckpt-step7.safetensors");
  EXPECT_EQ(read_latest(dir.path()), dir.path() + "/ckpt-step7.safetensors");
  EXPECT_FALSE(std::filesystem::exists(dir.file("latest.tmp." + std::to_string(::getpid()))));
}

TEST(CheckpointDir, MissingEmptyAndUnsetAreThreeDifferentErrors) {
  ScratchDir dir;
  std::string missing = error_of([&] { read_latest(dir.path()); });
  const std::string latest = dir.file("latest");
  EXPECT_NE(missing.find(latest + "' does not exist"), std::string::npos) << missing;
  write_text(dir.file("latest"), "");
  std::string empty = error_of([&] { read_latest(dir.path()); });
  EXPECT_NE(empty.find(latest + "' is empty"), std::string::npos) << empty;
  EXPECT_EQ(empty.find("missing"), std::string::npos) << empty;
  std::string unset = error_of([&] { read_latest(""); });
  EXPECT_NE(unset.find("--checkpoint-dir, which is not set"), std::string::npos) << unset;
}

TEST(CheckpointDir, LatestPointingOutsideTheFolderIsRefused) {
  ScratchDir dir;
  for (const char* name : {"../other/ckpt.safetensors", "/etc/passwd", "sub/ckpt.safetensors", ".."}) {
    write_text(dir.file("latest"), std::string(name) + "\n");
    std::string m = error_of([&] { read_latest(dir.path()); });
    EXPECT_NE(m.find("which is not a file inside '" + dir.path() + "'"), std::string::npos) << name << ": " << m;
  }
}

TEST(CheckpointDir, StaleTempFilesOfDeadWritersAreRemovedOthersKept) {
  ScratchDir dir;
  const std::string dead = dir.file("ckpt-step4.safetensors.tmp." + std::to_string(dead_pid()));
  const std::string mine = dir.file("ckpt-step8.safetensors.tmp." + std::to_string(::getpid()));
  const std::string live = dir.file("ckpt-step9.safetensors.tmp.1");  // pid 1 always exists
  const std::string other = dir.file("notes.tmp.txt");
  for (const auto& p : {dead, mine, live, other}) write_text(p, "x");
  auto removed = remove_stale_temp_files(dir.path());
  EXPECT_EQ(removed, std::vector<std::string>{dead});
  EXPECT_FALSE(std::filesystem::exists(dead));
  for (const auto& p : {mine, live, other}) EXPECT_TRUE(std::filesystem::exists(p)) << p;
  EXPECT_TRUE(remove_stale_temp_files(dir.file("no_such_dir")).empty());
}
