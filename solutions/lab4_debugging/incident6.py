"""Incident 6 — "On the new cluster the job dies at start-up on every node. Same code ran fine last month."

The new cluster's environment module exports COURSE_IFNAME, the name of the network interface
its documentation says to use. Reproduce, diagnose, fix `configure_network` below:

    python -m labs.lab4_debugging.run 6
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct

_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def interface_addresses() -> dict[str, str]:
    """{interface name: IPv4 address} for this machine's interfaces that have one."""
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
                out[name] = socket.inet_ntoa(raw[20:24])
            except OSError:  # no IPv4 address on it
                continue
    return out


def route_interface(master_addr: str) -> str:
    """The interface this machine would use to reach master_addr (UDP connect sends nothing; it only
    asks the kernel's routing table which local address it would use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(master_addr), 9))
        local = s.getsockname()[0]
    for name, addr in interface_addresses().items():
        if addr == local:
            return name
    raise RuntimeError(f"no interface holds {local}, the local address routing to {master_addr}")


def configure_network(master_addr: str) -> None:
    """Called on every rank before the process group starts: set the interface gloo and NCCL use (where the
    cluster's module suggests none, leave them as they are)."""
    # BEGIN SOLUTION Afterwards every rank, on any machine of the cluster, can start its process group: gloo and NCCL
    #                are pointed at an interface through which this machine reaches the master, the one the cluster's
    #                module suggests whenever it serves (a line in the log says when another is chosen); when the module
    #                suggests none, nothing changes.
    # HINT 1         The job dies at start-up: read the first error each rank prints. What does it name, where did that
    #                name come from, and what does this machine itself list?
    # HINT 2         configure_network trusts COURSE_IFNAME blindly: the documented interface does not exist on this
    #                machine, so gloo finds no address to use on it and every rank fails before the first collective.
    # HINT 3         Check the name against interface_addresses(); when it is missing, use route_interface(master_addr),
    #                the interface holding the address that routes to the master, say so in the log, and set
    #                GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME to it.
    # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME pin the interface; a name this machine does not have
    # (documentation from another cluster: ib0, eth1...) fails every rank at start-up. Trust a name
    # only after checking it exists here; otherwise take the interface that routes to the master.
    wanted = os.environ.get("COURSE_IFNAME")
    if not wanted:
        return
    have = interface_addresses()
    ifname = wanted if wanted in have else route_interface(master_addr)
    if ifname != wanted:
        print(f"COURSE_IFNAME={wanted} does not exist here (interfaces: {', '.join(sorted(have))}); "
              f"using {ifname}, which routes to {master_addr}", flush=True)
    os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = ifname
    # STARTER
    # ifname = os.environ.get("COURSE_IFNAME")  # set by the cluster's environment module
    # if ifname:
    #     os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = ifname
    # END SOLUTION
