// terminal_text.cpp - escape_for_terminal and error_line (see terminal_text.h): a small UTF-8 validator,
// \xNN escapes, and the program's name in front of a caught error.
#include "runtime/core/terminal_text.h"

#include "runtime/core/log.h"

namespace ddp::log {

namespace {
// Length of the valid UTF-8 sequence of two to four bytes starting at s[i], or 0 (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
size_t utf8_sequence_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}
}  // namespace

std::string escape_for_terminal(const std::string& text) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = utf8_sequence_length(text, i);
      const bool c1_control = n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0;
      if (n > 0 && !c1_control) {
        out.append(text, i, n);
        i += n;
        continue;
      }
    } else if ((c >= 0x20 && c != 0x7F) || c == '\n' || c == '\t') {
      out += text[i++];
      continue;
    }
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 0xF];
    ++i;
  }
  return out;
}

std::string error_line(const std::string& program, const std::string& what) {
  const std::string message = for_user(what);
  const std::string prefix = program + ": ";
  return message.rfind(prefix, 0) == 0 ? message : prefix + message;
}

}  // namespace ddp::log
