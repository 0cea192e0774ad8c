// line_buffer.cpp - whole-line splitting of worker output (see line_buffer.h).
#include "runtime/launch/line_buffer.h"

#include <cstring>

namespace ddp::launch {

void LineBuffer::feed(const char* data, size_t n, std::vector<std::string>* lines) {
  const char* end = data + n;
  while (data < end) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', static_cast<size_t>(end - data)));
    const char* stop = nl ? nl : end;
    partial_.append(data, stop);
    data = nl ? nl + 1 : end;
    while (partial_.size() > max_line_) {  // a runaway line: emit it in pieces
      lines->push_back(partial_.substr(0, max_line_) + "\n");
      partial_.erase(0, max_line_);
    }
    if (nl) {
      lines->push_back(partial_ + "\n");
      partial_.clear();
    }
  }
}

bool LineBuffer::flush(std::string* line) {
  if (partial_.empty()) return false;
  *line = partial_ + "\n";
  partial_.clear();
  return true;
}

}  // namespace ddp::launch
