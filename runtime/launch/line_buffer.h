// line_buffer.h - cuts a worker's byte stream into whole lines, so ddprun can write each line (with its
// "[rank N] " prefix) in one write() and lines of different ranks never interleave mid-line.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ddp::launch {

class LineBuffer {
 public:
  // A line longer than max_line bytes without a newline is cut into pieces of max_line bytes.
  explicit LineBuffer(size_t max_line = 64 * 1024) : max_line_(max_line) {}
  // Appends bytes; every completed line (ending in '\n') is appended to *lines.
  void feed(const char* data, size_t n, std::vector<std::string>* lines);
  // At end of stream: the unterminated tail as a line with '\n' added; false when there is none.
  bool flush(std::string* line);
  size_t pending() const { return partial_.size(); }

 private:
  size_t max_line_;
  std::string partial_;
};

}  // namespace ddp::launch
