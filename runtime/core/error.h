// error.h - the one exception type of ddp.cpp and the check macros that raise it with file:line.
// Every failure a user can cause ends here: the message names the thing that is wrong and the fix.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ddp {

// An error raised by ddp.cpp. what() starts with "file:line: ".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
// Builds "file:line: <parts...>" and throws ddp::Error.
template <class... Parts>
[[noreturn]] void fail(const char* file, int line, const Parts&... parts) {
  std::ostringstream os;
  os << file << ":" << line << ": ";
  append(os, parts...);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace ddp

// DDP_CHECK(cond, "message parts", value, ...): throws ddp::Error with file:line when cond is false.
#define DDP_CHECK(cond, ...)                                \
  do {                                                      \
    if (!(cond)) [[unlikely]]                               \
      ::ddp::detail::fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// DDP_FAIL("message parts", ...): throws unconditionally.
#define DDP_FAIL(...) ::ddp::detail::fail(__FILE__, __LINE__, __VA_ARGS__)
