"""Tool execution: the typed tool interface, the built-in tools, and the executor that turns an
assistant reply's ``tool_use`` blocks into progress and ``tool_result`` messages (spec §8)."""
