"""The generated configuration reference matches the property table."""
import os
import subprocess

import pytest

import harness


def test_configuration_doc_is_generated_from_the_table():
    if not os.path.exists(harness.SKIFFD):
        pytest.skip("build/skiffd is not built")
    out = subprocess.run([harness.SKIFFD, "--gen-config-doc"], capture_output=True, check=True,
                         text=True).stdout
    with open(os.path.join(harness.ROOT, "docs", "CONFIGURATION.md")) as f:
        committed = f.read()
    assert out == committed, "docs/CONFIGURATION.md is stale: run `make docs`"


def test_help_lists_every_property():
    if not os.path.exists(harness.SKIFFD):
        pytest.skip("build/skiffd is not built")
    out = subprocess.run([harness.SKIFFD, "--help"], capture_output=True, check=True,
                         text=True).stdout
    with open(os.path.join(harness.ROOT, "docs", "CONFIGURATION.md")) as f:
        names = [line.split("`")[1] for line in f if line.startswith("| `")]
    assert names, "no property found in docs/CONFIGURATION.md"
    for name in names:
        assert name in out, "%s missing from --help" % name
