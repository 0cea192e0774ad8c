// namespace_pair.cpp - creating and deleting the namespaces with iproute2's `ip`, each call bounded by a
// timeout (tests/support/run_process.h).
#include "tests/netns/namespace_pair.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "tests/support/run_process.h"

namespace ddp::testing {
namespace {

constexpr std::string_view kPrefix = "ddptest_";  // namespace names: ddptest_<pid>_<serial>_<node>
constexpr double kIpTimeoutS = 10;

std::string find_ip() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// Runs ip; empty on success, else a one-line description of the failure.
std::string run_ip(const std::string& ip, std::vector<std::string> args) {
  args.insert(args.begin(), ip);
  ProcessOptions opt;
  opt.timeout_s = kIpTimeoutS;
  ProcessResult r = run_process(args, opt);
  if (r.exit_code == 0 && !r.timed_out) return "";
  std::string cmd;
  for (const auto& a : args) cmd += (cmd.empty() ? "" : " ") + a;
  std::string msg = r.err.empty() ? r.out : r.err;
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (r.timed_out) msg = "timed out after " + std::to_string(static_cast<int>(kIpTimeoutS)) + " s";
  return "`" + cmd + "` failed (exit " + std::to_string(r.exit_code) + "): " + msg;
}

// Namespaces of this prefix whose creating process is gone were left by a killed test: delete them.
void delete_leftovers(const std::string& ip) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    long pid = std::strtol(name.c_str() + kPrefix.size(), nullptr, 10);
    if (pid <= 0 || std::filesystem::exists("/proc/" + std::to_string(pid), ec)) continue;
    run_ip(ip, {"netns", "del", name});
  }
}

}  // namespace

std::unique_ptr<NamespacePair> NamespacePair::create(std::string* why_not) {
  static std::atomic<int> serial{0};
  std::unique_ptr<NamespacePair> pair(new NamespacePair());
  pair->ip_ = find_ip();
  if (pair->ip_.empty()) {
    *why_not = "iproute2's `ip` is not installed (looked in /usr/sbin, /sbin, /usr/bin, /bin)";
    return nullptr;
  }
  delete_leftovers(pair->ip_);
  const std::string base =
      std::string(kPrefix) + std::to_string(::getpid()) + "_" + std::to_string(serial.fetch_add(1)) + "_";
  pair->nodes_ = {{base + "0", "veth0", "198.18.0.1"}, {base + "1", "veth1", "198.18.0.2"}};
  const NamespaceNode& a = pair->nodes_[0];
  const NamespaceNode& b = pair->nodes_[1];
  for (const auto& n : pair->nodes_) {
    if (std::string err = run_ip(pair->ip_, {"netns", "add", n.netns}); !err.empty()) {
      *why_not = "cannot create a network namespace (needs root or CAP_SYS_ADMIN): " + err;
      return nullptr;  // the destructor deletes what exists
    }
    pair->created_.push_back(n.netns);
  }
  std::vector<std::vector<std::string>> steps = {
      {"link", "add", "name", a.iface, "netns", a.netns, "type", "veth", "peer", "name", b.iface, "netns",
       b.netns},
      {"-n", a.netns, "addr", "add", a.address + "/30", "dev", a.iface},
      {"-n", b.netns, "addr", "add", b.address + "/30", "dev", b.iface},
      {"-n", a.netns, "link", "set", "lo", "up"},
      {"-n", b.netns, "link", "set", "lo", "up"},
      {"-n", a.netns, "link", "set", a.iface, "up"},
      {"-n", b.netns, "link", "set", b.iface, "up"},
  };
  for (const auto& step : steps) {
    if (std::string err = run_ip(pair->ip_, step); !err.empty()) {
      *why_not = "cannot set up the veth link between the namespaces: " + err;
      return nullptr;
    }
  }
  return pair;
}

NamespacePair::~NamespacePair() {
  for (const auto& ns : created_)
    if (std::string err = run_ip(ip_, {"netns", "del", ns}); !err.empty())
      std::fprintf(stderr, "warning: could not delete network namespace %s: %s\n", ns.c_str(), err.c_str());
}

std::vector<std::string> NamespacePair::exec_in(int i, const std::vector<std::string>& command) const {
  std::vector<std::string> argv = {ip_, "netns", "exec", node(i).netns};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace ddp::testing
