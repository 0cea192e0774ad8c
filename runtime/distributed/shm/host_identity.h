// host_identity.h - which ranks can share memory: a host identity string per rank (hostname, boot id, and the
// IPC, network and pid namespaces, so containers and the network-namespace "nodes" of the multi-node test
// count as separate hosts, and peers' pids are meaningful for the liveness check), exchanged through the store
// to group the ranks by host.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "runtime/distributed/store.h"

namespace ddp::dist::shm {

// "hostname/boot-id/ipc:[...]/net:[...]/pid:[...]" of this process.
std::string host_identity();

// Every rank publishes its identity (`identity`, or host_identity() when empty) under "<prefix>/host/<rank>" and
// reads all; returns, for each rank, the index of its host (hosts numbered in order of their lowest rank).
// Collective over the store: every rank of the group must call it with the same prefix.
std::vector<int> host_of_ranks(Store& store, const std::string& prefix, int rank, int size,
                               std::chrono::milliseconds timeout, const std::string& identity = "");

}  // namespace ddp::dist::shm
