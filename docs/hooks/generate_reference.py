"""MkDocs hook: the reference pages that the code already says, built from the code at every build.

- ``reference/cli.md``: the command registry (``agentbus_redis.cli.main.COMMANDS``) and each command's
  own ``--help`` (click's plain formatter, the text a user gets in the terminal).
- ``reference/settings.md``: every field of the pydantic-settings model ``Settings``, with its environment
  variable (``AGENTBUS_…`` with ``__`` between nested names), type, default and description.
- ``reference/metrics.md``: every metric family a worker exports (``observability.metrics.metric_families``).
- ``reference/alerts.md``: the alerting rules of ``deploy/prometheus/alerts.yml``.
- ``how-to/operations.md``: ``deploy/README.md`` (the operations guide), its links into the repository
  turned into plain paths (those files are not part of the site).

Nothing here is copied by hand: a renamed option, setting, metric or alert changes its page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]


def cell(text: object) -> str:
    """One Markdown table cell: pipes escaped, newlines folded."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


# --- CLI -------------------------------------------------------------------------------------------------


def command_help(command: Any, path: str) -> str:
    """What ``path --help`` prints. Typer ships its own click (``typer._click``): the command's own
    context class is used, never ``click.Context``."""
    with command.context_class(command, info_name=path, terminal_width=100, max_content_width=100) as ctx:
        return str(command.get_help(ctx))


def cli_sections(command: Any, path: str, level: int) -> list[str]:
    parts = [f"{'#' * level} `{path}`", "", "```text", command_help(command, path), "```", ""]
    if hasattr(command, "list_commands"):  # a group: each sub-command with its own help
        ctx = command.context_class(command, info_name=path)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                parts += cli_sections(sub, f"{path} {name}", min(level + 1, 4))
    return parts


def cli_page() -> str:
    import typer

    from agentbus_redis.cli.main import COMMANDS, app, load_command

    root = typer.main.get_command(app)
    lines = [
        "# CLI reference",
        "",
        "Generated at build time from the command registry (`agentbus_redis.cli.main.COMMANDS`) and each",
        "command's own help: what `agentbus COMMAND --help` prints.",
        "",
        "| command | what it does |",
        "| --- | --- |",
        *(f"| [`agentbus {name}`](#agentbus-{name}) | {cell(spec.summary)} |" for name, spec in COMMANDS.items()),
        "",
        "## `agentbus`",
        "",
        "```text",
        command_help(root, "agentbus"),
        "```",
        "",
    ]
    for name, spec in COMMANDS.items():
        lines += cli_sections(load_command(name, spec), f"agentbus {name}", 2)
    return "\n".join(lines)


# --- settings --------------------------------------------------------------------------------------------


def env_names(name: str, info: FieldInfo, prefix: str) -> list[str]:
    alias = info.validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return [str(choice) for choice in choices]
    if isinstance(alias, str):
        return [alias]
    return [f"{prefix}{name.upper()}"]


def default_of(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "–"
    if isinstance(value, BaseModel):
        return "–"
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, (dict, list)):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def type_of(info: FieldInfo) -> str:
    annotation = info.annotation
    text = getattr(annotation, "__name__", None) if getattr(annotation, "__args__", None) is None else None
    return f"`{text or str(annotation).replace('typing.', '')}`"


def settings_rows(model: type[BaseModel], prefix: str) -> tuple[list[str], list[tuple[str, type[BaseModel]]]]:
    rows, nested = [], []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            nested.append((f"{prefix}{name.upper()}__", annotation))
            continue
        names = " or ".join(f"`{env}`" for env in env_names(name, info, prefix))
        rows.append(f"| {names} | {type_of(info)} | {cell(default_of(info))} | {cell(info.description or '')} |")
    return rows, nested


def settings_page() -> str:
    from agentbus_redis.config.settings import Settings

    header = ["| variable | type | default | what |", "| --- | --- | --- | --- |"]
    rows, nested = settings_rows(Settings, "AGENTBUS_")
    lines = [
        "# Settings reference",
        "",
        "Generated at build time from the pydantic-settings model `agentbus_redis.config.settings.Settings`.",
        "Every process reads these from the environment and from a `.env` file in its working directory",
        "(`NAME=value` lines; the environment wins). Nested settings join their names with `__`",
        "(`AGENTBUS_TOOLS__WORKSPACE`); lists and dicts are JSON (`AGENTBUS_TOOLS__ALLOW='[\"Read\"]'`).",
        "",
        "## Top level",
        "",
        *header,
        *rows,
        "",
    ]
    while nested:
        prefix, model = nested.pop(0)
        sub_rows, sub_nested = settings_rows(model, prefix)
        nested.extend(sub_nested)
        doc = (model.__doc__ or "").strip().splitlines()
        lines += [f"## `{prefix}*`", "", doc[0] if doc else "", "", *header, *sub_rows, ""]
    return "\n".join(lines)


# --- metrics and alerts ----------------------------------------------------------------------------------


def metrics_page() -> str:
    from agentbus_redis.observability.metrics import metric_families

    suffix = {"counter": "_total", "histogram": " (`_bucket`, `_count`, `_sum`)", "info": "_info"}
    rows = [
        f"| `{family.name}{suffix.get(family.type, '') if family.type != 'histogram' else ''}` | {family.type}"
        f"{suffix['histogram'] if family.type == 'histogram' else ''} | {cell(family.documentation)} |"
        for family in sorted(metric_families(), key=lambda family: family.name)
    ]
    return "\n".join(
        [
            "# Metrics reference",
            "",
            "Generated at build time from `agentbus_redis.observability.metrics.metric_families()`: every",
            "family a worker exports on `/metrics` (Prometheus text format). `AGENTBUS_METRICS=false` turns the",
            "`agentbus_*` recording off. What the metrics mean for operations, and the dashboards:",
            "[Operations](../how-to/operations.md).",
            "",
            "| sample name | type | what it measures |",
            "| --- | --- | --- |",
            *rows,
            "",
        ]
    )


def alerts_page() -> str:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text(encoding="utf-8"))
    lines = [
        "# Alerts reference",
        "",
        "Generated at build time from `deploy/prometheus/alerts.yml` (checked by `promtool` in the tests; wired",
        "into docker compose and the Kubernetes manifests). What to do when one fires:",
        "[Operations](../how-to/operations.md).",
        "",
    ]
    for group in rules["groups"]:
        lines += [f"## {group['name']}", ""]
        for rule in group["rules"]:
            notes = rule.get("annotations", {})
            lines += [
                f"### {rule['alert']}",
                "",
                f"**{rule.get('labels', {}).get('severity', '')}**, after {rule.get('for', '0s')}: "
                f"{notes.get('summary', '')}",
                "",
                notes.get("description", ""),
                "",
                "```promql",
                rule["expr"].strip(),
                "```",
                "",
            ]
    return "\n".join(lines)


# --- the operations guide --------------------------------------------------------------------------------

LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|#)([^)#]*)(#[^)]*)?\)")


def operations_page() -> str:
    text = (ROOT / "deploy/README.md").read_text(encoding="utf-8")

    def plain(match: re.Match[str]) -> str:
        target = match.group(2)
        if target in ("../README.md", ""):
            return match.group(1)
        return f"{match.group(1)} (`deploy/{target}`)" if not target.startswith("..") else match.group(1)

    body = LINK.sub(plain, text)
    return (
        "<!-- Generated at build time from deploy/README.md; edit that file. -->\n"
        + body
        + "\n\nThe rules behind the alerts: [Alerts reference](../reference/alerts.md); every metric:"
        " [Metrics reference](../reference/metrics.md).\n"
    )


PAGES = {
    "reference/cli.md": cli_page,
    "reference/settings.md": settings_page,
    "reference/metrics.md": metrics_page,
    "reference/alerts.md": alerts_page,
    "how-to/operations.md": operations_page,
}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for src_uri, build in PAGES.items():
        files.append(File.generated(config, src_uri, content=build()))
    return files
