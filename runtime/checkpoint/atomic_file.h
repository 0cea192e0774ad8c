// atomic_file.h - write a file so that readers (and a crash) see either the old content or the new one,
// never a mix: write "<path>.tmp.<pid>", fsync it, rename it over <path>, fsync the directory.
// A writer destroyed before commit() removes its temp file. A process killed mid-write leaves the temp
// file behind (the target is untouched); the next write of the same path from the same pid truncates it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp::checkpoint {

class AtomicFileWriter {
 public:
  // Creates (or truncates) the temp file next to `path`. Throws ddp::Error when it cannot.
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends all `n` bytes (retries short writes and EINTR).
  void write(const void* data, size_t n);
  // fsync, close, rename over the target, fsync the directory. After this the destructor does nothing.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t bytes_written_ = 0;
};

// The temp file name AtomicFileWriter uses for `path` in this process.
std::string atomic_temp_path(const std::string& path);

}  // namespace ddp::checkpoint
