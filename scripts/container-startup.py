#!/usr/bin/env python3
"""Start-up to ready, on the host and in a container, and the image's size: the figures of
docs/OPERATIONS.md ("In a container").

    python3 scripts/container-startup.py [--binary target/release/sluice] [--runs 10]

Builds the image with packaging/container/build-offline in podman storage of its own (vfs,
runc, cgroupfs, under a temporary directory, as the container tests do; run as root), then
times, `--runs` times each, from the command to the first `200` of `/readyz`:
  - host: `sluice serve` started as a process;
  - container, first run: `podman run -d` of a new container on a new volume;
  - container, restart: `podman start` of that container after `podman stop`.
Prints the median and the slowest of each, and the image's and the binary's sizes.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = "localhost/sluice-startup:latest"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ready(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def until_ready(port, started):
    deadline = started + 60
    while time.monotonic() < deadline:
        if ready(port):
            return (time.monotonic() - started) * 1000
        time.sleep(0.002)
    sys.exit(f"nothing ready on port {port} after 60 s")


def podman_env(root):
    with open(os.path.join(root, "containers.conf"), "w") as f:
        f.write('[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n'
                'cgroup_manager = "cgroupfs"\nevents_logger = "file"\n')
    with open(os.path.join(root, "storage.conf"), "w") as f:
        f.write(f'[storage]\ndriver = "vfs"\ngraphroot = "{root}/storage"\n'
                f'runroot = "{root}/run"\n')
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = os.path.join(root, "containers.conf")
    env["CONTAINERS_STORAGE_CONF"] = os.path.join(root, "storage.conf")
    return env


def podman(env, *args):
    return subprocess.run(["podman", *args], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def host_runs(binary, runs):
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as data:
            port = free_port()
            started = time.monotonic()
            hub = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}",
                                    "--data-dir", data], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            times.append(until_ready(port, started))
            hub.terminate()
            hub.wait()
    return times


def container_runs(env, runs):
    first, restart = [], []
    for n in range(runs):
        port = free_port()
        name = f"startup{n}"
        started = time.monotonic()
        podman(env, "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8080",
               "-v", f"startup{n}:/data", IMAGE)
        first.append(until_ready(port, started))
        podman(env, "stop", name)
        started = time.monotonic()
        podman(env, "start", name)
        restart.append(until_ready(port, started))
        podman(env, "rm", "--force", "--time", "0", name)
    return first, restart


def show(what, times):
    print(f"{what:<28} median {statistics.median(times):7.1f} ms   slowest {max(times):7.1f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=os.path.join(REPO, "target/release/sluice"))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        env = podman_env(root)
        try:
            subprocess.run([os.path.join(REPO, "packaging/container/build-offline"),
                            args.binary, IMAGE], env=env, check=True, stdout=subprocess.DEVNULL)
            size = int(podman(env, "image", "inspect", "--format", "{{.Size}}", IMAGE))
            stripped = os.path.join(root, "sluice")
            subprocess.run(["strip", "--strip-debug", "-o", stripped, args.binary], check=True)
            print(f"binary {os.path.getsize(stripped) / 1e6:.1f} MB as in the image (debug "
                  f"information stripped), image {size / 1e6:.1f} MB ({args.runs} runs each)")
            show("host: sluice serve", host_runs(args.binary, args.runs))
            first, restart = container_runs(env, args.runs)
            show("container: podman run", first)
            show("container: podman start", restart)
        finally:
            subprocess.run(["podman", "rm", "--all", "--force", "--time", "0"], env=env,
                           capture_output=True)
            subprocess.run(["podman", "volume", "prune", "--force"], env=env,
                           capture_output=True)


if __name__ == "__main__":
    main()
