// host_identity.cpp - the host identity of this process and the store exchange that groups ranks by host.
#include "runtime/distributed/shm/host_identity.h"

#include <unistd.h>

#include <fstream>
#include <map>

namespace ddp::dist::shm {

namespace {
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}
std::string link_target(const std::string& path) {
  char buf[256];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}
}  // namespace

std::string host_identity() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + first_line("/proc/sys/kernel/random/boot_id") + "/" +
         link_target("/proc/self/ns/ipc") + "/" + link_target("/proc/self/ns/net") + "/" +
         link_target("/proc/self/ns/pid");
}

std::vector<int> host_of_ranks(Store& store, const std::string& prefix, int rank, int size,
                               std::chrono::milliseconds timeout, const std::string& identity) {
  const auto key = [&](int r) { return prefix + "/host/" + std::to_string(r); };
  const std::string mine = identity.empty() ? host_identity() : identity;
  store.set(key(rank), mine);
  std::vector<int> host(size);
  std::map<std::string, int> index;
  for (int r = 0; r < size; ++r) {
    const std::string id = r == rank ? mine : store.get(key(r), timeout);
    auto it = index.emplace(id, static_cast<int>(index.size())).first;
    host[r] = it->second;
  }
  return host;
}

}  // namespace ddp::dist::shm
