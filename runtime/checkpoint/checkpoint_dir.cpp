// checkpoint_dir.cpp - `latest`, its atomic update and stale temp files (see checkpoint_dir.h).
#include "runtime/checkpoint/checkpoint_dir.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/checkpoint/atomic_file.h"
#include "runtime/core/error.h"

namespace ddp::checkpoint {
namespace {

// The pid in "<name>.tmp.<pid>", or -1 when `file_name` is not such a temp file.
long temp_file_pid(const std::string& file_name) {
  const size_t at = file_name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return -1;
  const std::string digits = file_name.substr(at + 5);
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stol(digits);
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;  // EPERM: alive, someone else's
}

}  // namespace

std::string read_latest(const std::string& dir) {
  DDP_CHECK(!dir.empty(), "--resume auto looks for the newest checkpoint in --checkpoint-dir, which is not set: "
                          "pass --checkpoint-dir DIR, or give --resume the path of a checkpoint file");
  const std::string latest = dir + "/latest";
  struct stat st {};
  DDP_CHECK(::stat(latest.c_str(), &st) == 0, "--resume auto: no checkpoint to resume in '", dir, "': '", latest,
            "' does not exist (", std::strerror(errno),
            "); start without --resume, or give --resume the path of a checkpoint file");
  std::ifstream in(latest);
  std::string name;
  DDP_CHECK(in, "--resume auto: cannot read '", latest, "': ", std::strerror(errno));
  std::getline(in, name);
  DDP_CHECK(!name.empty(), "--resume auto: '", latest,
            "' is empty (a save interrupted by an older ddp.cpp, or an edit); write the name of a checkpoint "
            "file of '", dir, "' into it, or give --resume the checkpoint's path");
  DDP_CHECK(name.size() <= 255, "--resume auto: '", latest, "' holds ", name.size(),
            " characters, not a file name; write the name of a checkpoint file into it");
  DDP_CHECK(name.find('/') == std::string::npos && name != "." && name != "..", "--resume auto: '", latest,
            "' names '", name, "', which is not a file inside '", dir,
            "' (it may only hold a plain file name); resume a checkpoint elsewhere by giving --resume its path");
  return dir + "/" + name;
}

void write_latest(const std::string& dir, const std::string& file_name) {
  DDP_CHECK(!file_name.empty() && file_name.find('/') == std::string::npos,
            "write_latest: '", file_name, "' is not a plain file name");
  AtomicFileWriter out(dir + "/latest");
  const std::string line = file_name + "\n";
  out.write(line.data(), line.size());
  out.commit();
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const long pid = temp_file_pid(name);
    if (pid < 0 || pid == static_cast<long>(::getpid()) || process_alive(pid)) continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    if (std::filesystem::remove(it->path(), type_ec)) removed.push_back(it->path().string());
  }
  return removed;
}

}  // namespace ddp::checkpoint
