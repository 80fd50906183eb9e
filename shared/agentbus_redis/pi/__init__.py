"""pi (pi-mono's coding agent): the project's second source dialect (``spec/pi-messages.md``, P1–P10).

Pure like the rest of ``shared/``: the lossless message and session-entry model, the 1→2→3 migration,
rebuilding the context from the session tree, ``convertToLlm``, ``transformMessages``, pi's own
Anthropic conversion, and the mapping to and from Claude Code's message model.
"""
