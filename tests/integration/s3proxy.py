"""A fault-injecting HTTP proxy in front of the S3 emulator, for the object store tests.

skiffd's objects.url points at the proxy (endpoint=http://127.0.0.1:PORT) instead of the
emulator. Requests pass through unchanged (SigV4 signs the Host header, which the proxy
leaves as the client wrote it), unless a rule says otherwise:

    proxy.fail(503, methods=("PUT",))    answer 503 SlowDown (500 InternalError, ...)
                                         without reaching the emulator
    proxy.stall(methods=("PUT",))        hold matching requests before forwarding them,
                                         until proxy.release() or the client gives up
    proxy.hold_response(methods=("PUT",), key_part="data/")
                                         forward the request (the object gets stored), but
                                         keep the answer from the client until release():
                                         a client killed meanwhile never learns it succeeded
    proxy.fail_after(1, 500, methods=("PUT",))
                                         let the next matching request through, fail
                                         the ones after it (paths let through in
                                         passed_paths)
    proxy.slow(10e6, methods=("PUT",))   forward matching requests as if through one
                                         link of 10 MB/s that they share: each waits
                                         for the bodies before it, then its own
    proxy.passthrough()                  back to normal (held requests are let go)

A rule matches on the HTTP method and a substring of the path. Counters (`seen`,
`failed`, `held`, `completed_puts`) let a test wait for "a PUT is in flight".

One thread per client connection; everything stops with close(). The proxy binds
127.0.0.1 only.
"""

import socket
import threading
import time


class _Rule:
    def __init__(self, action, methods=None, key_part=None, status=503, count=None,
                 rate=None):
        self.action = action
        self.rate = rate  # slow: bytes per second of the shared link
        self.methods = set(methods) if methods else None
        self.key_part = key_part
        self.status = status
        self.count = count  # None: unlimited
        self.ok = 0         # fail_after: matching requests still let through

    def matches(self, method, path):
        if self.methods is not None and method not in self.methods:
            return False
        if self.key_part is not None and self.key_part not in path:
            return False
        return self.count is None or self.count > 0


_REASONS = {500: ("Internal Server Error", "InternalError", "We encountered an internal error."),
            503: ("Slow Down", "SlowDown", "Please reduce your request rate."),
            502: ("Bad Gateway", "BadGateway", "Bad gateway."),
            504: ("Gateway Timeout", "GatewayTimeout", "Gateway timeout.")}


class S3Proxy:
    def __init__(self, upstream_port, upstream_host="127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(128)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.rule = None
        self.release_ev = threading.Event()
        self.closed = False
        self.seen = {}           # method -> requests received
        self.failed = 0          # answered with an injected error
        self.held = 0            # requests or answers held right now
        self.held_total = 0
        self.held_paths = []     # every request or answer ever held, in order
        self.passed_paths = []   # requests fail_after let through, in order
        self.completed_puts = 0  # PUTs the emulator answered 2xx
        self.link_free = 0.0     # slow: when the shared link is free again
        self.conns = set()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    # ------------------------------------------------------------ rules

    def _set(self, rule):
        with self.lock:
            old = self.release_ev
            self.rule = rule
            self.release_ev = threading.Event()
        old.set()  # whatever the previous rule held goes on

    def passthrough(self):
        self._set(None)

    def fail(self, status=503, methods=None, key_part=None, count=None):
        self._set(_Rule("fail", methods, key_part, status, count))

    def fail_after(self, ok, status=503, methods=None, key_part=None):
        """Lets the next `ok` matching requests through (their paths in passed_paths),
        then fails the others."""
        r = _Rule("fail", methods, key_part, status)
        r.ok = ok
        self._set(r)

    def stall(self, methods=None, key_part=None):
        self._set(_Rule("stall", methods, key_part))

    def slow(self, bytes_per_s, methods=None, key_part=None):
        self._set(_Rule("slow", methods, key_part, rate=float(bytes_per_s)))

    def hold_response(self, methods=None, key_part=None, count=None):
        self._set(_Rule("hold", methods, key_part, count=count))

    def release(self):
        """Lets held requests go on (the rule stays; new requests are held again)."""
        with self.lock:
            old = self.release_ev
            self.release_ev = threading.Event()
        old.set()

    def wait_held(self, n=1, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                if self.held >= n:
                    return True
            time.sleep(0.01)
        return False

    def _decide(self, method, path):
        with self.lock:
            self.seen[method] = self.seen.get(method, 0) + 1
            r = self.rule
            if r is None or not r.matches(method, path):
                return None, None
            if r.ok > 0:
                r.ok -= 1
                self.passed_paths.append(path)
                return None, None
            if r.count is not None:
                r.count -= 1
            return r, self.release_ev

    # ------------------------------------------------------------ plumbing

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conns.add(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def close(self):
        self.closed = True
        self.passthrough()
        try:
            self.lsock.close()
        except OSError:
            pass
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


class _Stream:
    """Buffered reads from a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _more(self):
        chunk = self.sock.recv(1 << 18)
        if not chunk:
            raise EOFError()
        self.buf += chunk

    def head(self):
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > (1 << 20):
                raise EOFError()
            self._more()
        i = self.buf.index(b"\r\n\r\n") + 4
        h, self.buf = self.buf[:i], self.buf[i:]
        return h

    def exact(self, n):
        while len(self.buf) < n:
            self._more()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def line(self):
        while b"\r\n" not in self.buf:
            self._more()
        i = self.buf.index(b"\r\n") + 2
        d, self.buf = self.buf[:i], self.buf[i:]
        return d


def _parse_head(h):
    lines = h.decode("latin-1").split("\r\n")
    first = lines[0]
    headers = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return first, headers


def _read_body(st, headers, no_body=False):
    """The message body as raw bytes (chunked bodies kept chunked)."""
    if no_body:
        return b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            ln = st.line()
            out += ln
            size = int(ln.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers up to the empty line
                    t = st.line()
                    out += t
                    if t == b"\r\n":
                        return out
            out += st.exact(size + 2)
    return st.exact(int(headers.get("content-length", "0")))


def _peer_gone(c):
    try:
        return c.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _error_response(status, path):
    reason, code, msg = _REASONS.get(status, ("Error", "InternalError", "Injected error."))
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s'
            '</Message><Resource>%s</Resource><RequestId>proxy</RequestId></Error>'
            % (code, msg, path)).encode()
    return (("HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n"
             "Connection: close\r\n\r\n") % (status, reason, len(body))).encode() + body


def _serve(self, c):
    cs = _Stream(c)
    up = None
    us = None
    try:
        while not self.closed:
            try:
                h = cs.head()
            except (EOFError, OSError):
                return
            first, headers = _parse_head(h)
            method, path = first.split(" ")[0], first.split(" ")[1]
            rule, ev = self._decide(method, path)
            expect = headers.get("expect", "").lower() == "100-continue"
            if rule is not None and rule.action == "fail":
                with self.lock:
                    self.failed += 1
                if not expect:
                    _read_body(cs, headers)
                c.sendall(_error_response(rule.status, path))
                return
            if rule is not None and rule.action == "stall":
                with self.lock:
                    self.held += 1
                    self.held_total += 1
                    self.held_paths.append(path)
                try:
                    while not ev.wait(0.05):
                        if self.closed:
                            return
                finally:
                    with self.lock:
                        self.held -= 1
                if _peer_gone(c):
                    return  # the client gave up (its timeout): the request never arrives
            if expect:
                # Answer the client's Expect ourselves and forward the whole request
                # without it (curl does not sign Expect).
                c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                h = b"\r\n".join(ln for ln in h.split(b"\r\n")
                                 if not ln.lower().startswith(b"expect:"))
            body = _read_body(cs, headers)
            if rule is not None and rule.action == "slow":
                with self.lock:
                    now = time.monotonic()
                    self.link_free = max(self.link_free, now) + len(body) / rule.rate
                    wait = self.link_free - now
                time.sleep(wait)
            if up is None:
                up = socket.create_connection(self.upstream, timeout=120)
                up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                us = _Stream(up)
            up.sendall(h + body)
            while True:
                rh = us.head()
                rfirst, rheaders = _parse_head(rh)
                status = int(rfirst.split(" ")[1])
                if status >= 200:
                    break
            rbody = _read_body(us, rheaders,
                               no_body=method == "HEAD" or status in (204, 304))
            if method == "PUT" and 200 <= status < 300:
                with self.lock:
                    self.completed_puts += 1
            if rule is not None and rule.action == "hold":
                with self.lock:
                    self.held += 1
                    self.held_total += 1
                    self.held_paths.append(path)
                try:
                    while not ev.wait(0.05):
                        if self.closed:
                            return
                finally:
                    with self.lock:
                        self.held -= 1
            c.sendall(rh + rbody)
            if rheaders.get("connection", "").lower() == "close":
                return
    except (EOFError, OSError, ValueError, IndexError):
        return
    finally:
        with self.lock:
            self.conns.discard(c)
        for s in (c, up):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass


S3Proxy._serve = _serve
