#!/usr/bin/python3
"""A userspace TCP forwarder with a one-way delay and faults, for the zone tests.

    zonefwd.py --listen HOST:PORT --target HOST:PORT [--delay-ms 1] [--control PATH]
               [--mark N] [--max-conns 64] [--buffer-kib 1024] [--lifetime 900]
               [--owner-pid PID]

Every connection accepted on --listen is forwarded to --target; each chunk read in
either direction is written DELAY ms after it was read (a one-way delay, as between
two availability zones: this kernel may have no netem). PORT 0 listens on a free port.
When it listens it prints one line, `zonefwd listening HOST:PORT -> HOST:PORT pid PID`.

Control (--control, a Unix socket): send one command line, read one JSON line back;
a command has taken effect when its answer arrives.
    stats          {"state", "delay_ms", "accepted", "active", "refused", "bytes_up",
                    "bytes_down", "dropped"} (up: towards the target)
    stall          stop forwarding without closing anything: connections stay open,
                   nothing moves (what is read stays buffered, up to --buffer-kib per
                   direction, then nothing is read); new connections are accepted and
                   stalled too
    resume         forward again (what was held goes at once, in order)
    drop           reset every open connection, both sides (RST)
    close          close every open connection, both sides (FIN)
    refuse         close new connections at once (until resume); open ones go on
    delay MS       change the one-way delay
    quit           exit (as SIGTERM does)
`zonefwd.py --control PATH --command CMD` sends CMD to the forwarder and prints the answer.

--mark sets SO_MARK on the connections to the target, so that an nftables rule that
sends a node's traffic to this forwarder can leave the forwarder's own traffic alone.
Bounded: at most --max-conns connections, --buffer-kib KiB held per direction of
each, and the process exits after --lifetime seconds or once --owner-pid has exited.
"""

import argparse
import asyncio
import collections
import ctypes
import json
import os
import signal
import socket
import struct
import sys
import time

CHUNK = 65536


def hostport(s):
    host, port = s.rsplit(":", 1)
    return host.strip("[]"), int(port)


class Pipe:
    """One direction of a connection: reads from r, writes to w DELAY after reading."""

    def __init__(self, fwd, link, r, w, up):
        self.fwd, self.link, self.r, self.w, self.up = fwd, link, r, w, up
        self.queue = collections.deque()      # (monotonic time read, bytes or None for EOF)
        self.held = 0
        self.more = asyncio.Event()           # something was queued
        self.room = asyncio.Event()           # held fell below the limit
        self.room.set()

    async def read_loop(self):
        while True:
            await self.fwd.running.wait()     # not while stalled
            await self.room.wait()
            data = await self.r.read(CHUNK)
            self.queue.append((time.monotonic(), data or None))
            self.more.set()
            if not data:
                return
            self.held += len(data)
            if self.held >= self.fwd.limit:
                self.room.clear()

    async def write_loop(self):
        while True:
            while not self.queue:
                self.more.clear()
                await self.more.wait()
            t, data = self.queue[0]
            wait = t + self.fwd.delay - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.fwd.running.wait()
            self.queue.popleft()
            if data is None:
                if self.w.can_write_eof():
                    self.w.write_eof()
                return
            self.w.write(data)
            await self.w.drain()
            self.held -= len(data)
            if self.up:
                self.fwd.bytes_up += len(data)
            else:
                self.fwd.bytes_down += len(data)
            if self.held < self.fwd.limit:
                self.room.set()


class Link:
    def __init__(self, fwd, cr, cw, sr, sw):
        self.fwd, self.writers = fwd, (cw, sw)
        self.pipes = (Pipe(fwd, self, cr, sw, True), Pipe(fwd, self, sr, cw, False))

    async def run(self):
        tasks = [asyncio.ensure_future(f()) for p in self.pipes
                 for f in (p.read_loop, p.write_loop)]
        self.tasks = tasks
        try:
            await asyncio.gather(*tasks)
        except (OSError, asyncio.CancelledError, ConnectionError):
            pass
        finally:
            for t in tasks:
                t.cancel()
            for w in self.writers:
                w.close()

    def end(self, reset):
        for w in self.writers:
            sock = w.get_extra_info("socket")
            if reset and sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            w.transport.abort() if reset else w.close()
        for t in getattr(self, "tasks", ()):
            t.cancel()


class Forwarder:
    def __init__(self, args):
        self.args = args
        self.target = hostport(args.target)
        self.delay = args.delay_ms / 1000.0
        self.limit = args.buffer_kib * 1024
        self.running = asyncio.Event()
        self.running.set()
        self.refusing = False
        self.links = set()
        self.accepted = self.refused = self.dropped = 0
        self.bytes_up = self.bytes_down = 0
        self.done = asyncio.Event()

    def state(self):
        if not self.running.is_set():
            return "stalled"
        return "refusing" if self.refusing else "forwarding"

    async def handle(self, cr, cw):
        if self.refusing or len(self.links) >= self.args.max_conns:
            self.refused += 1
            cw.close()
            return
        self.accepted += 1
        try:
            sock = socket.socket(socket.AF_INET6 if ":" in self.target[0] else socket.AF_INET)
            sock.setblocking(False)
            if self.args.mark:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, self.args.mark)
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, self.target), 10)
            sr, sw = await asyncio.open_connection(sock=sock)
        except (OSError, asyncio.TimeoutError) as e:
            print("zonefwd: cannot reach %s:%d: %s" % (self.target + (e,)), file=sys.stderr,
                  flush=True)
            cw.close()
            return
        for w in (cw, sw):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = Link(self, cr, cw, sr, sw)
        self.links.add(link)
        try:
            await link.run()
        finally:
            self.links.discard(link)

    def end_all(self, reset):
        n = len(self.links)
        for link in list(self.links):
            link.end(reset)
        self.dropped += n
        return n

    def command(self, line):
        words = line.split()
        cmd = words[0] if words else ""
        if cmd == "stall":
            self.running.clear()
        elif cmd == "resume":
            self.refusing = False
            self.running.set()
        elif cmd == "drop":
            return {"ok": True, "dropped": self.end_all(True)}
        elif cmd == "close":
            return {"ok": True, "closed": self.end_all(False)}
        elif cmd == "refuse":
            self.refusing = True
        elif cmd == "delay" and len(words) == 2:
            self.delay = float(words[1]) / 1000.0
        elif cmd == "quit":
            self.done.set()
        elif cmd != "stats":
            return {"ok": False, "error": "unknown command %r" % line}
        return {"ok": True, "state": self.state(), "delay_ms": self.delay * 1000.0,
                "accepted": self.accepted, "active": len(self.links),
                "refused": self.refused, "dropped": self.dropped,
                "bytes_up": self.bytes_up, "bytes_down": self.bytes_down}

    async def control(self, r, w):
        try:
            line = await asyncio.wait_for(r.readline(), 10)
            w.write((json.dumps(self.command(line.decode(errors="replace").strip())) + "\n")
                    .encode())
            await w.drain()
        except (OSError, asyncio.TimeoutError):
            pass
        finally:
            w.close()

    async def watch_owner(self):
        deadline = time.monotonic() + self.args.lifetime
        while time.monotonic() < deadline:
            if self.args.owner_pid:
                try:
                    os.kill(self.args.owner_pid, 0)
                except ProcessLookupError:
                    break
            await asyncio.sleep(0.5)
        self.done.set()

    async def main(self):
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.done.set)
        host, port = hostport(self.args.listen)
        srv = await asyncio.start_server(self.handle, host, port, backlog=64)
        ctl = None
        if self.args.control:
            try:
                os.unlink(self.args.control)
            except FileNotFoundError:
                pass
            ctl = await asyncio.start_unix_server(self.control, self.args.control)
        got = srv.sockets[0].getsockname()
        print("zonefwd listening %s:%d -> %s:%d pid %d" % (got[0], got[1], self.target[0],
                                                           self.target[1], os.getpid()),
              flush=True)
        watcher = asyncio.ensure_future(self.watch_owner())
        await self.done.wait()
        watcher.cancel()
        srv.close()
        if ctl:
            ctl.close()
            try:
                os.unlink(self.args.control)
            except OSError:
                pass
        self.end_all(False)
        await asyncio.sleep(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", help="HOST:PORT to accept on (PORT 0: any)")
    ap.add_argument("--target", help="HOST:PORT to forward to")
    ap.add_argument("--delay-ms", type=float, default=1.0, help="one-way delay (default 1)")
    ap.add_argument("--control", help="Unix socket path for commands")
    ap.add_argument("--mark", type=int, default=0, help="SO_MARK of connections to the target")
    ap.add_argument("--max-conns", type=int, default=64)
    ap.add_argument("--buffer-kib", type=int, default=1024,
                    help="bytes held per direction of a connection, in KiB")
    ap.add_argument("--lifetime", type=float, default=900.0, help="exit after this many seconds")
    ap.add_argument("--owner-pid", type=int, default=0, help="exit once this process is gone")
    ap.add_argument("--command", help="send this command to the forwarder at --control")
    args = ap.parse_args()
    if args.command:
        if not args.control:
            ap.error("--command needs --control")
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(args.control)
        s.sendall((args.command + "\n").encode())
        sys.stdout.write(s.makefile().readline())
        s.close()
        return
    if not args.listen or not args.target:
        ap.error("--listen and --target are needed")
    # Timers of this process fire within 1 us, not the default 50 us: the delay is
    # a timer per chunk (PR_SET_TIMERSLACK).
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    asyncio.run(Forwarder(args).main())


if __name__ == "__main__":
    main()
