// host.cpp - free port, random hex, PATH search, signal names, core count (see host.h).
#include "runtime/launch/host.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/core/error.h"

namespace ddp::launch {

int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  DDP_CHECK(fd >= 0, "ddprun: picking a free port (--standalone, --master-port 0): socket() failed: ",
            std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int err = errno;
  ::close(fd);
  DDP_CHECK(ok,
            "ddprun: picking a free port (--standalone, --master-port 0): could not bind one on 127.0.0.1: ",
            std::strerror(err), "; pass --master-port N instead");
  return ntohs(addr.sin_port);
}

std::string random_hex(int nbytes) {
  std::ifstream in("/dev/urandom", std::ios::binary);
  DDP_CHECK(in.good(), "ddprun: cannot open /dev/urandom for the run token; set DDP_RUN_TOKEN yourself");
  std::string raw(static_cast<size_t>(nbytes), '\0');
  in.read(raw.data(), nbytes);
  DDP_CHECK(in.gcount() == nbytes, "ddprun: short read from /dev/urandom; set DDP_RUN_TOKEN yourself");
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return hex;
}

std::string find_program(const std::string& program) {
  DDP_CHECK(!program.empty(), "ddprun: empty program name");
  if (program.find('/') != std::string::npos) {
    DDP_CHECK(::access(program.c_str(), X_OK) == 0, "ddprun: program '", program,
              "' is not an executable file (", std::strerror(errno), ")");
    return program;
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  DDP_FAIL("ddprun: program '", program, "' not found in PATH; give its path (e.g. ./", program, ")");
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);  // glibc >= 2.32: "KILL" for 9
  if (abbrev) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

int cpu_core_count() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace ddp::launch
