# GENERATED from solutions/lab4_debugging/incident6.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
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
    ifname = os.environ.get("COURSE_IFNAME")  # set by the cluster's environment module
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = ifname
