// namespace_pair.h - two network namespaces joined by a veth pair, for multi-node tests on one machine:
// node 0 is 198.18.0.1/30 on veth0, node 1 is 198.18.0.2/30 on veth1 (198.18.0.0/15 is reserved for
// benchmarking, so it never clashes with a real network). The veth pair is created inside the namespaces, so
// nothing is added to the host's own namespace; deleting the namespaces removes everything.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace ddp::testing {

struct NamespaceNode {
  std::string netns;    // namespace name, unique per test process
  std::string iface;    // its end of the veth pair
  std::string address;  // its IPv4 address (without the /30)
};

class NamespacePair {
 public:
  // Creates both namespaces and the link (lo and the veth ends up). Returns null with *why_not set (the step
  // that failed and ip's message, e.g. no permission or no iproute2) when the machine does not allow it;
  // whatever was already created is deleted again. Also deletes namespaces left by killed test processes.
  static std::unique_ptr<NamespacePair> create(std::string* why_not);
  // Deletes both namespaces (the veth pair goes with them).
  ~NamespacePair();
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  const NamespaceNode& node(int i) const { return nodes_.at(static_cast<size_t>(i)); }
  // `ip netns exec <netns of node i> command...`
  std::vector<std::string> exec_in(int i, const std::vector<std::string>& command) const;

 private:
  NamespacePair() = default;
  std::string ip_;                    // path of the ip program
  std::vector<NamespaceNode> nodes_;  // both nodes, filled as they are planned
  std::vector<std::string> created_;  // namespaces that exist and must be deleted
};

}  // namespace ddp::testing
