"""``lazy_facade``: a package's public names are imported when first asked for, kept, and only those."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

# In a fresh interpreter: this one has imported everything already.
FIRST_ACCESS = """
import sys
import agentbus_redis.confinement as confinement
assert "agentbus_redis.confinement.session_network" not in sys.modules
policy = confinement.session_network_policy
assert "agentbus_redis.confinement.session_network" in sys.modules
assert vars(confinement)["session_network_policy"] is policy  # the next access does not come back
"""


def test_a_name_is_imported_when_asked_for_and_kept() -> None:
    done = subprocess.run([sys.executable, "-c", FIRST_ACCESS], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_an_unknown_name_is_an_attribute_error_and_dir_lists_the_public_surface() -> None:
    confinement = importlib.import_module("agentbus_redis.confinement")
    with pytest.raises(AttributeError, match=re.escape("'agentbus_redis.confinement' has no attribute 'nope'")):
        _ = confinement.nope
    assert dir(confinement) == sorted(confinement.__all__)


def test_a_name_re_exported_from_another_package_is_found_by_its_dotted_path() -> None:
    sdk = importlib.import_module("agentbus_redis.sdk")
    tools = importlib.import_module("agentbus_redis.tools.function_tool")
    assert sdk.FunctionTool is tools.FunctionTool
