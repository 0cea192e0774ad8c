// atomic_file.cpp - temp file + fsync + rename + directory fsync (see atomic_file.h).
#include "runtime/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/core/error.h"

namespace ddp::checkpoint {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// fsync of the directory makes the rename itself durable.
void fsync_directory(const std::string& dir, const std::string& target) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DDP_CHECK(dfd >= 0, "saving '", target, "': cannot open its directory '", dir,
            "' to fsync it: ", errno_text());
  int rc = ::fsync(dfd);
  int saved = errno;
  ::close(dfd);
  errno = saved;
  // Some file systems do not support fsync on directories (EINVAL); the rename has happened, so accept that.
  DDP_CHECK(rc == 0 || errno == EINVAL, "saving '", target, "': fsync of directory '", dir,
            "' failed: ", errno_text());
}

}  // namespace

std::string atomic_temp_path(const std::string& path) {
  return path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), temp_path_(atomic_temp_path(path_)) {
  DDP_CHECK(!path_.empty(), "atomic write: the target path is empty; pass the file to write");
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  DDP_CHECK(fd_ >= 0, "saving '", path_, "': cannot create temp file '", temp_path_, "': ", errno_text(),
            " (does the directory exist and is it writable?)");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  DDP_CHECK(fd_ >= 0 && !committed_, "saving '", path_, "': write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    DDP_CHECK(w > 0, "saving '", path_, "': write to '", temp_path_, "' failed after ", bytes_written_,
              " bytes: ", w < 0 ? errno_text() : std::string("wrote 0 bytes"), " (disk full?)");
    p += w;
    n -= static_cast<size_t>(w);
    bytes_written_ += static_cast<uint64_t>(w);
  }
}

void AtomicFileWriter::commit() {
  DDP_CHECK(fd_ >= 0 && !committed_, "saving '", path_, "': commit called twice");
  DDP_CHECK(::fsync(fd_) == 0, "saving '", path_, "': fsync of '", temp_path_, "' failed: ", errno_text());
  int rc = ::close(fd_);
  fd_ = -1;
  DDP_CHECK(rc == 0, "saving '", path_, "': close of '", temp_path_, "' failed: ", errno_text());
  DDP_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "saving '", path_, "': rename of '", temp_path_,
            "' over it failed: ", errno_text());
  committed_ = true;
  fsync_directory(directory_of(path_), path_);
}

}  // namespace ddp::checkpoint
