"""deploy/: the systemd unit passes `systemd-analyze verify`, and its sandbox keeps
`systemd-analyze security`'s exposure level low (the unit is checked offline, with
ExecStart pointing at the skiffd under test: verify wants an executable there)."""
import os
import re
import shutil
import subprocess

import pytest

import harness

UNIT = os.path.join(harness.ROOT, "deploy", "skiffd.service")


@pytest.fixture
def unit(tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is missing (Debian's systemd)")
    with open(UNIT) as f:
        text = f.read()
    assert "ExecStart=/usr/local/bin/skiffd " in text
    path = tmp_path / "skiffd.service"
    path.write_text(text.replace("/usr/local/bin/skiffd", os.path.join(harness.BUILD, "skiffd")))
    return str(path)


def test_unit_verifies(unit):
    r = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and not r.stderr.strip(), (r.returncode, r.stdout, r.stderr)


def test_unit_is_sandboxed(unit):
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", unit],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", r.stdout)
    assert m, r.stdout
    print("exposure %s %s" % (m.group(1), m.group(2)))
    assert float(m.group(1)) <= 2.0, r.stdout
    lines = [x.strip() for x in r.stdout.splitlines()]
    for must in ("NoNewPrivileges=", "ProtectSystem=", "PrivateDevices=",
                 "RestrictAddressFamilies=~AF_PACKET", "SystemCallFilter=~@mount",
                 "CapabilityBoundingSet=~CAP_SYS_ADMIN"):
        line = next((x for x in lines if must in x), "")
        assert line.startswith("✓"), (must, line)
