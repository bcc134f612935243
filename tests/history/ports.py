"""What a Spark JVM exposes, seen from outside it: the TCP ports it listens on (read from /proc, Linux)
and whether one of them serves a client that did not authenticate."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

__all__ = ["is_loopback", "listening", "unauthenticated_rpc"]

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
_RPC_REQUEST = 3  # org.apache.spark.network.protocol.Message.Type.RpcRequest


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket of process ``pid`` in the listening state."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/{pid}/net/{table}") as lines:
            next(lines)  # the header
            for line in lines:
                fields = line.split()
                if fields[3] == _LISTEN and fields[9] in inodes:
                    found.append(_address(fields[1], family))
    return found


def _address(text: str, family: int) -> tuple[str, int]:
    """``0100007F:1F90`` (the kernel's byte order, 32-bit words) as ("127.0.0.1", 8080)."""
    hexaddress, hexport = text.split(":")
    raw = bytes.fromhex(hexaddress)
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw), int(hexport, 16)


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def unauthenticated_rpc(address: str, port: int, timeout: float = 10.0) -> str:
    """The text of the answer that Spark's RPC or block manager port gives an RpcRequest sent
    without authenticating first (frame: length, type, request id, body length, body)."""
    body = b"hello"
    message = struct.pack(">bqi", _RPC_REQUEST, 7, len(body)) + body
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    with socket.create_connection((str(ip), port), timeout) as connection:
        connection.sendall(struct.pack(">q", 8 + len(message)) + message)
        answer = b""
        while len(answer) < 8 or len(answer) < struct.unpack(">q", answer[:8])[0]:
            chunk = connection.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer[8:].decode("utf-8", "replace")
