"""Sub-agents (agent-loop.md §A): the ``Agent`` tool's pure rules.

``ids`` (A3.1 agentId, child session ids), ``definitions`` (A2 agent definitions, A3.4 tools, A3.5
model), ``tool`` (A1 input and definition), ``turn`` (when a child's turn is over), ``results`` (A5/A8
what the parent receives), ``progress`` (A6), ``limits`` (A9). No I/O: the glue is ``subagents/``.
"""
