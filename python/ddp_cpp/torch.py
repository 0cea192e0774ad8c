"""ddp_cpp.torch - registers ddp.cpp's shared-memory collectives as the torch.distributed backend "ddpcpp".

    import torch.distributed as dist
    import ddp_cpp.torch  # noqa: F401
    dist.init_process_group("ddpcpp")               # CPU tensors; or "cpu:ddpcpp,cuda:nccl"

Ranks on one host move through /dev/shm; across hosts the group is hierarchical (shared memory inside each host,
PyTorch's Gloo between the hosts' lowest ranks), under the same backend name. Rendezvous goes
through torch.distributed's own store; init_process_group's timeout bounds every collective, and a failed
collective (a peer died, stopped or called something else) raises torch.distributed.DistBackendError on every
rank, naming the collective, its sequence number and the ranks. docs/pytorch.md, "A torch.distributed backend".
"""
import os

import torch.distributed as dist

from . import _C

BACKEND_NAME = "ddpcpp"


def _hosts(store, rank, size, timeout):
    """Every rank's host index, from the ranks' host identities (hostname, boot id, namespaces) exchanged
    through the group's store. DDP_TORCH_PRETEND_HOST (tests: any name, set per process) replaces this
    process's identity, so that one machine's ranks can play several hosts."""
    return _C.host_of_ranks(store, rank, size, timeout.total_seconds(), os.environ.get("DDP_TORCH_PRETEND_HOST", ""))


def _create(store, rank, size, timeout):
    # The flight record goes where PyTorch users look for NCCL's: beside TORCH_FR_DUMP_TEMP_FILE, unless
    # DDP_FLIGHT_RECORDER_DIR says otherwise (ddp.cpp reads it when the group is made).
    fr = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if fr and not os.environ.get("DDP_FLIGHT_RECORDER_DIR"):
        os.environ["DDP_FLIGHT_RECORDER_DIR"] = os.path.dirname(os.path.abspath(fr)) or "."
    hosts = _hosts(store, rank, size, timeout) if size > 1 else [0]
    if len(set(hosts)) == 1:
        return _C.create_backend(store, rank, size, timeout.total_seconds())
    # Across hosts: shared memory inside each host, PyTorch's Gloo between the hosts' lowest ranks (the
    # leaders, numbered by host), rendezvousing under a prefix of this group's store.
    leaders = None
    if hosts.index(hosts[rank]) == rank:
        leaders = dist.ProcessGroupGloo(dist.PrefixStore("ddpcpp-leaders/", store), hosts[rank], max(hosts) + 1,
                                        timeout)
    return _C.create_backend(store, rank, size, timeout.total_seconds(), hosts, leaders)


def flight_record(group=None):
    """The ddpcpp group's recent collectives as a JSON string (the default group when group is None)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    import torch
    return pg._get_backend(torch.device("cpu")).flight_record_json()


def dump_flight_record(path):
    """Writes every ddpcpp group's flight record of this process to `path` (JSON; tools/ddp_flight reads it)."""
    _C.dump_flight_record(path)


if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=False, devices=["cpu"])
