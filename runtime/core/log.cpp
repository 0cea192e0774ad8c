// log.cpp - the logger behind DDP_LOG: one write() per line so lines of threads never interleave; and the
// removal of source locations from what users read (see log.h), escaped for the terminal (terminal_text.h).
#include "runtime/core/log.h"

#include "runtime/core/terminal_text.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ddp::log {
namespace {
Level level_from_env() {
  const char* v = std::getenv("DDP_DEBUG");
  if (!v) return Level::Warn;
  if (!std::strcmp(v, "DETAIL")) return Level::Detail;
  if (!std::strcmp(v, "INFO")) return Level::Info;
  return Level::Warn;
}
bool launcher_prefixes_output() {
  const char* v = std::getenv("DDPRUN_PREFIXES_OUTPUT");
  return v && !std::strcmp(v, "1");
}
std::atomic<int> g_level{static_cast<int>(level_from_env())};
std::atomic<int> g_rank{-1};
std::mutex g_mu;

bool is_path_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-' || c == '+';
}

// Length of a "path.ext:123: " location starting at s[i], or 0 when there is none.
size_t location_length(const std::string& s, size_t i) {
  size_t j = i;
  while (j < s.size() && is_path_char(s[j])) ++j;
  if (j == i || j >= s.size() || s[j] != ':') return 0;
  const std::string path = s.substr(i, j - i);
  bool source = false;
  for (const char* ext : {".cpp", ".h", ".cu", ".cuh", ".hpp", ".cc"}) {
    const size_t n = std::strlen(ext);
    if (path.size() > n && path.compare(path.size() - n, n, ext) == 0) source = true;
  }
  if (!source) return 0;
  size_t k = j + 1;
  while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
  if (k == j + 1 || k + 1 >= s.size() || s[k] != ':' || s[k + 1] != ' ') return 0;
  return k + 2 - i;
}
}  // namespace

Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
void set_level(Level l) { g_level.store(static_cast<int>(l)); }
void set_rank(int rank) { g_rank.store(rank); }

std::string strip_source_locations(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size();) {
    // A location starts the message or follows a space, a newline, '(' or a quote.
    const bool boundary = i == 0 || std::strchr(" \n(\"'", message[i - 1]) != nullptr;
    const size_t n = boundary ? location_length(message, i) : 0;
    if (n > 0) {
      i += n;
      continue;
    }
    out += message[i++];
  }
  return out;
}

std::string for_user(const std::string& message) {
  return escape_for_terminal(enabled(Level::Info) ? message : strip_source_locations(message));
}

void write(Level l, const std::string& msg) {
  static const char* names[] = {"ERROR", "WARN", "INFO", "DETAIL"};
  std::string line;
  int r = g_rank.load();
  if (r >= 0 && !launcher_prefixes_output()) line += "[rank " + std::to_string(r) + "] ";
  line += "ddp ";
  line += names[static_cast<int>(l)];
  line += ": ";
  line += for_user(msg);
  line += '\n';
  std::lock_guard<std::mutex> g(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}
}  // namespace ddp::log
