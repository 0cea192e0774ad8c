// log.cpp - the logger behind DDP_LOG: one write() per line so lines of threads never interleave.
#include "runtime/core/log.h"

#include <atomic>
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
std::atomic<int> g_level{static_cast<int>(level_from_env())};
std::atomic<int> g_rank{-1};
std::mutex g_mu;
}  // namespace

Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
void set_level(Level l) { g_level.store(static_cast<int>(l)); }
void set_rank(int rank) { g_rank.store(rank); }

void write(Level l, const std::string& msg) {
  static const char* names[] = {"ERROR", "WARN", "INFO", "DETAIL"};
  std::string line;
  int r = g_rank.load();
  if (r >= 0) line += "[rank " + std::to_string(r) + "] ";
  line += "ddp ";
  line += names[static_cast<int>(l)];
  line += ": ";
  line += msg;
  line += '\n';
  std::lock_guard<std::mutex> g(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}
}  // namespace ddp::log
