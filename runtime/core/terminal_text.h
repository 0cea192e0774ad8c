// terminal_text.h - text that is safe to print on a terminal. Error messages quote what they read (a trace's
// JSON parser shows the bytes it stopped at, a checkpoint its tensor names), and a corrupt file can hold any
// byte: raw invalid UTF-8 garbles the line, and an escape sequence can rewrite the terminal. log::for_user()
// (log.h), which every program prints its caught errors through, applies escape_for_terminal.
#pragma once
#include <string>

namespace ddp::log {

// `text` with each byte that is not part of valid UTF-8, and each control character other than newline and
// tab (ESC, CR, NUL, DEL, the C1 controls U+0080..U+009F), written as \xNN byte by byte; valid UTF-8
// (accents, CJK, emoji) is kept.
std::string escape_for_terminal(const std::string& text);

// The line a program prints for an error it caught: "program: " + for_user(what) (no source locations unless
// DDP_DEBUG=INFO, escaped), without a second "program: " when the message already starts with one.
std::string error_line(const std::string& program, const std::string& what);

}  // namespace ddp::log
