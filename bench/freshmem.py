#!/usr/bin/env python3
"""bench/freshmem.py PATH MIB: what storing into fresh pages costs on this machine.

Writes MIB MiB, 1 MiB at a time, into a new file PATH (meant to be on a tmpfs: the
pages come from the kernel's free pool), deletes it, and prints one JSON object:
mib, seconds, cpu_s (this process, user + system), mb_s, cpu_s_per_gb. On a VM whose
kernel hands freed pages back to the host, each first touch of such a page costs a
trip to the host, and a copy into fresh pages runs far below memory bandwidth."""
import json
import os
import sys
import time


def main():
    path, mib = sys.argv[1], int(sys.argv[2])
    buf = os.urandom(1 << 20)
    c0, t0 = os.times(), time.monotonic()
    try:
        with open(path, "wb", buffering=0) as f:
            for _ in range(mib):
                f.write(buf)
        c1, t1 = os.times(), time.monotonic()
    finally:
        if os.path.exists(path):
            os.unlink(path)
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    gb = mib * 1048576 / 1e9
    print(json.dumps({"mib": mib, "seconds": t1 - t0, "cpu_s": cpu,
                      "mb_s": gb * 1000 / max(t1 - t0, 1e-9), "cpu_s_per_gb": cpu / gb}))


if __name__ == "__main__":
    main()
