"""How an MCP server's tool is named to the model: ``mcp__<server>__<tool>`` (Claude Code's rule)."""

from __future__ import annotations

import re

MCP_PREFIX = "mcp__"
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
MAX_TOOL_NAME = 128
"""The Messages API's limit on a tool name."""


def normalize_mcp_name(name: str) -> str:
    """Characters a tool name may not hold become ``_`` (as Claude Code's ``normalizeNameForMCP``)."""
    return _NOT_ALLOWED.sub("_", name)


def mcp_tool_name(server: str, tool: str) -> str:
    """``mcp__server__tool``: the name the model calls and permission rules match."""
    return f"{MCP_PREFIX}{normalize_mcp_name(server)}__{normalize_mcp_name(tool)}"
