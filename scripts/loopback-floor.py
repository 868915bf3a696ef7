#!/usr/bin/env python3
"""The kernel's floor for fanning out over loopback TCP, independent of sluice.

One process writes SIZE-byte chunks round-robin over N loopback connections (TCP_NODELAY, like
the hub); a second process reads them all with epoll (like a load generator). Both report their
CPU time per write. The writer's system time is what any hub pays per write() to a client on
this machine; the reader's is what a load generator on the same machine pays per chunk.

    python3 scripts/loopback-floor.py 10000 300000 1500    # N, writes, SIZE

docs/BENCHMARKS.md ("What limits the hub") uses it to bound what any server can do here.
"""
import os
import resource
import select
import socket
import sys
import time


def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def reader(port, n, want, ready):
    ep = select.epoll()
    conns = {}
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        c.setblocking(False)
        ep.register(c.fileno(), select.EPOLLIN)
        conns[c.fileno()] = c
    os.write(ready, b"x")
    u0, s0 = cpu()
    total = chunks = 0
    while total < want:
        for fd, _ in ep.poll():
            try:
                total += len(conns[fd].recv(1 << 16))
                chunks += 1
            except BlockingIOError:
                pass
    u, s = cpu()
    print(f"reader: {chunks} reads, user {(u - u0) * 1e6 / chunks:.2f} us/read, "
          f"sys {(s - s0) * 1e6 / chunks:.2f} us/read")


def main():
    n, writes, size = (int(a) for a in sys.argv[1:4])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    port = listener.getsockname()[1]
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        listener.close()
        reader(port, n, writes * size, ready_w)
        os._exit(0)
    accepted = [listener.accept()[0] for _ in range(n)]
    for a in accepted:
        a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    os.read(ready_r, 1)
    chunk = b"x" * size
    u0, s0 = cpu()
    t0 = time.monotonic()
    for i in range(writes):
        accepted[i % n].sendall(chunk)
    wall = time.monotonic() - t0
    u, s = cpu()
    print(f"writer: {n} connections, {writes} writes of {size} B in {wall:.2f} s: "
          f"user {(u - u0) * 1e6 / writes:.2f} us/write, sys {(s - s0) * 1e6 / writes:.2f} us/write")
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
