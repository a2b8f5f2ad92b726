"""Runs the Java programs of tests/java for the group and admin tests (test_40NN).

tools(): several Kafka command-line tools (kafka-consumer-groups, kafka-configs,
kafka-log-dirs, ...) in one JVM through io.skiff.clients.Tools; each command
gives back a dict with its exit code, stdout and stderr. java(): any other
io.skiff.clients program.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ktest  # noqa: E402

JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
       "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]

_cp = None


def classpath():
    global _cp
    if _cp is None:
        _cp = ktest.build_java()
    return _cp


def java(program, args, timeout=120, check=False):
    """Runs io.skiff.clients.<program>; returns (exit code, stdout lines, stderr)."""
    p = ktest.run(["java"] + JVM + ["-cp", classpath(), "io.skiff.clients." + program,
                                    "--timeout", str(timeout - 10)] + list(args),
                  timeout=timeout, check=check, what=program)
    return p.returncode, p.stdout.decode(errors="replace").splitlines(), p.stderr.decode(
        errors="replace")


def json_lines(lines):
    out = []
    for line in lines:
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def tools(*cmds, timeout=150):
    """cmds: lists like ["groups", "--bootstrap-server", bs, "--list"]. Returns one dict per
    command: tool, args, exit (None when the tool returned without calling exit), out, err,
    and for admin-* commands result or error."""
    argv = []
    for c in cmds:
        if argv:
            argv.append("+")
        argv += list(c)
    p = ktest.run(["java"] + JVM + ["-cp", classpath(), "io.skiff.clients.Tools",
                                    "--timeout", str(timeout - 10)] + argv,
                  timeout=timeout, check=False, what="Tools")
    res = [r for r in json_lines(p.stdout.decode(errors="replace").splitlines())
           if r.get("op") == "tool"]
    if len(res) != len(cmds):
        raise AssertionError("Tools ran %d of %d commands (exit %d):\n%s\n%s" % (
            len(res), len(cmds), p.returncode, ktest.tail(p.stdout), ktest.tail(p.stderr)))
    return res


def show(r):
    """A command's result for an assertion message."""
    return "%s %s -> exit %s %s\n--- out ---\n%s\n--- err ---\n%s" % (
        r["tool"], " ".join(r["args"]), r["exit"], r.get("error", ""), ktest.tail(r["out"], 3000),
        ktest.tail(r["err"], 3000))
