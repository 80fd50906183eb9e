"""Options of the API normalization pipeline: feature gates (§0: OFF unless stated) and the context
Claude Code reads from its runtime (current tools, interactive mode, model, user context)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

LEGACY_TOOL_NAME_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "Task": "Agent",
        "KillShell": "TaskStop",
        "AgentOutputTool": "TaskOutput",
        "BashOutputTool": "TaskOutput",
    }
)
"""Legacy tool name → canonical name (Claude Code's ``normalizeLegacyToolName`` table, used by R4.6
for tool_reference names and here also as the tool aliases of R4.7)."""

EXIT_PLAN_MODE_TOOL_NAME = "ExitPlanMode"
FILE_EDIT_TOOL_NAME = "Edit"


class NormalizeOptions(BaseModel):
    """Everything the normalizer needs to know about the session it prepares a request for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_search_enabled: bool = False
    """R4.6/R4.7/R4.22: the tool-search beta is on (tool_reference blocks and ``caller`` allowed)."""
    tool_names: frozenset[str] | None = None
    """Canonical names of the tools of this request; ``None`` = unknown (every name is taken as an
    existing tool, so R4.7's rules apply by name and R4.6 removes no tool_reference as unavailable)."""
    tool_aliases: Mapping[str, str] = Field(default_factory=lambda: dict(LEGACY_TOOL_NAME_ALIASES))
    """Alias → canonical tool name (R4.6 legacy normalization, R4.7 canonical names)."""
    advisor_enabled: bool = False
    """R4.22: the advisor beta header is sent (otherwise advisor blocks are stripped)."""
    chair_sermon: bool = False
    """Gate ``tengu_chair_sermon`` (R4.8 wrap, R4.11 universal smoosh, R4.18)."""
    toolref_defer: bool = False
    """Gate ``tengu_toolref_defer_j8m`` (R4.6 step 3 OFF-branch, R4.13 ON-branch)."""
    snip: bool = False
    """Internal feature HISTORY_SNIP (R4.10 meta rule, R4.20 ``[id:]`` tags)."""
    interactive: bool = True
    """Interactive session: selects the media error texts of R4.3."""
    strict_pairing: bool = False
    """R4.30: raise instead of repairing tool_use/tool_result pairing."""
    results_in_call_order: bool = False
    """The tool_results of a reply's calls in the order of its tool_use blocks (``order_tool_results_by_call``),
    not in the order they completed as Claude Code sends them (R8.8)."""
    media_limit: int = 100
    """R4.23: most images+documents one request may carry."""
    max_image_base64_bytes: int = 5 * 1024 * 1024
    """R4.21: longest base64 image string the API accepts."""
    user_context: dict[str, str] | None = None
    """R4.24c: context (CLAUDE.md, date…) prepended as a meta user message; ``None``/empty = none."""
    from_last_compact_boundary: bool = True
    """R4.24a: send only the messages from the last compact boundary on."""
    target_model: str | None = None
    """Model the request goes to; thinking of other models is never replayed (api_safety)."""
    thinking_enabled: bool | None = False
    """Extended thinking in the request (API §1.10). ``False`` (the default): the request carries no
    thinking config, which the API treats as disabled, so the open assistant turn carries no thinking.
    ``True``: the request enables thinking; the open turn keeps its signed thinking. ``None``: the
    request's sender sets thinking and fits it to the open turn (the model worker's
    ``build_model_params``, agent-loop.md M1.6): the open turn keeps its signed thinking, byte-identical,
    so a tool loop passes the last assistant turn's thinking back as the API requires, and validation
    skips the two thinking-mode rules (``validate_request``)."""
    extra_block_types: frozenset[str] = frozenset()
    """Block types beyond the generally accepted ones that this request's betas allow (api_safety)."""

    def canonical_tool_name(self, name: str) -> str | None:
        """R4.7: the canonical name of the tool called ``name`` (directly or by alias), or ``None``
        when no current tool matches."""
        alias_target = self.tool_aliases.get(name)
        if self.tool_names is None:
            return alias_target or name
        if name in self.tool_names:
            return name
        if alias_target is not None and alias_target in self.tool_names:
            return alias_target
        return None

    def legacy_normalized(self, name: str) -> str:
        """R4.6: ``normalizeLegacyToolName``."""
        return self.tool_aliases.get(name, name)
