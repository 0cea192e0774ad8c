// log.h - leveled logging to stderr with the rank in front. The level comes from DDP_DEBUG
// (OFF, INFO, DETAIL; default OFF prints warnings and errors only) and can be set in code.
//
// What users read carries no source locations: ddp::Error messages start with "file:line: " (for
// developers), and for_user() removes those unless DDP_DEBUG is INFO or DETAIL. write() applies it, and
// programs print caught errors through it. The "[rank N] " prefix is left out when the launcher already
// puts one in front of every line (ddprun sets DDPRUN_PREFIXES_OUTPUT=1 in its workers).
#pragma once
#include <sstream>
#include <string>

#include "runtime/core/error.h"

namespace ddp::log {

enum class Level : int { Error = 0, Warn = 1, Info = 2, Detail = 3 };

// Current level: read once from DDP_DEBUG, then whatever set_level() said.
Level level();
void set_level(Level l);
// Rank shown in front of each line ("[rank 0] "); -1 shows none. Ignored under a prefixing launcher.
void set_rank(int rank);
void write(Level l, const std::string& msg);

// `message` without the "path/file.cpp:123: " source locations ddp::Error puts in front of its parts,
// unless the level is Info or more (DDP_DEBUG=INFO or DETAIL): then unchanged.
std::string for_user(const std::string& message);
// The same without looking at the level (for tests).
std::string strip_source_locations(const std::string& message);

inline bool enabled(Level l) { return static_cast<int>(l) <= static_cast<int>(level()); }

}  // namespace ddp::log

#define DDP_LOG(lvl, ...)                                       \
  do {                                                          \
    if (::ddp::log::enabled(::ddp::log::Level::lvl)) {          \
      std::ostringstream ddp_os_;                               \
      ::ddp::detail::append(ddp_os_, __VA_ARGS__);              \
      ::ddp::log::write(::ddp::log::Level::lvl, ddp_os_.str()); \
    }                                                           \
  } while (0)
