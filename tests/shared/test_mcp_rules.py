"""The pure MCP rules (issue 29): reading ``.mcp.json`` (with Claude Code's ``${VAR}`` expansion), naming a
server's tools, and an MCP ``tools/call`` result as a tool_result."""

from __future__ import annotations

import json

import pytest

from agentbus_redis.mcp import (
    HttpServer,
    McpConfigError,
    McpProgress,
    McpSandboxOptions,
    MissingVariables,
    StdioServer,
    expand_variables,
    mcp_progress_data,
    mcp_tool_name,
    mcp_tool_output,
    merge_mcp_configs,
    parse_mcp_config,
    server_sandbox,
)
from agentbus_redis.messages.content import ImageBlock, TextBlock
from agentbus_redis.permissions.rules import parse_rule, rule_matches_whole_tool

PNG = "iVBORw0KGgo="


def _config(servers: object) -> str:
    return json.dumps({"mcpServers": servers})


# --- ${VAR} expansion -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${HOME}/x", "/home/u/x"),
        ("${UNSET:-fallback}", "fallback"),
        ("${HOME:-fallback}", "/home/u"),
        ("${UNSET:-}", ""),
        ("a ${HOME} b ${HOME}", "a /home/u b /home/u"),
        ("$HOME and {HOME}", "$HOME and {HOME}"),
        ("Bearer ${TOKEN}", "Bearer t0k"),
    ],
)
def test_variables_expand_as_claude_code_does(text: str, expected: str) -> None:
    assert expand_variables(text, {"HOME": "/home/u", "TOKEN": "t0k"}) == expected


def test_every_unset_variable_without_a_default_is_named() -> None:
    with pytest.raises(MissingVariables) as raised:
        expand_variables("${A} ${B:-b} ${C}", {})
    assert raised.value.names == ["A", "C"]


# --- .mcp.json -------------------------------------------------------------------------------------------


def test_a_stdio_server_needs_no_type_and_an_http_server_says_http() -> None:
    text = _config(
        {
            "files": {"command": "npx", "args": ["-y", "server", "${ROOT}"], "env": {"KEY": "${KEY:-none}"}},
            "api": {
                "type": "http",
                "url": "https://api.example/${PATH_PART}",
                "headers": {"Authorization": "Bearer ${T}"},
            },
            "own": {"command": "run", "agentbus": {"perSession": True, "required": True}},
        }
    )
    config = parse_mcp_config(text, source=".mcp.json", env={"ROOT": "/srv", "PATH_PART": "mcp", "T": "tok"})
    files, api, own = (config.mcp_servers[name] for name in ("files", "api", "own"))
    assert isinstance(files, StdioServer)
    assert (files.command, files.args, files.env) == ("npx", ["-y", "server", "/srv"], {"KEY": "none"})
    assert not files.agentbus.per_session
    assert isinstance(api, HttpServer)
    assert (api.url, api.headers) == ("https://api.example/mcp", {"Authorization": "Bearer tok"})
    assert own.agentbus.per_session
    assert own.agentbus.required


def test_keys_claude_code_knows_and_agentbus_ignores_are_kept() -> None:
    config = parse_mcp_config(_config({"s": {"type": "stdio", "command": "x", "timeout": 5}}), source="f", env={})
    assert config.mcp_servers["s"].model_extra == {"timeout": 5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "f.json:1:2: not JSON: Expecting property name enclosed in double quotes"),
        ("[]", "f.json: must be a JSON object with an mcpServers key"),
        (_config({"s": {"args": []}}), "f.json: mcpServers.s.command: Field required"),
        (_config({"s": {"type": "sse", "url": "http://x"}}), "f.json: mcpServers.s: type must be 'stdio'"),
        (_config({"s": {"type": "http", "url": "ftp://x"}}), "f.json: mcpServers.s.url: Value error, must start with"),
        (
            _config({"s": {"command": "x", "env": {"K": 1}}}),
            "f.json: mcpServers.s.env.K: Input should be a valid string",
        ),
        (_config({"s": {"command": "x", "env": {"K": "${NOPE}"}}}), "f.json: mcpServers.s.env.K: environment variable"),
        (_config({"s": {"command": "${NOPE}"}}), "f.json: mcpServers.s.command: environment variable(s) not set: NOPE"),
        (_config({"a__b": {"command": "x"}}), "f.json: mcpServers: Value error, server name 'a__b' must be"),
        (_config({"a b": {"command": "x"}}), "f.json: mcpServers: Value error, server name 'a b' must be"),
        (_config({"s": {"command": "x", "agentbus": {"perSesion": True}}}), "f.json: mcpServers.s.agentbus.perSesion"),
        (
            _config({"s": {"type": "http", "url": "http://x", "agentbus": {"sandbox": True}}}),
            "f.json: mcpServers.s: Value error, agentbus.sandbox applies to stdio servers only",
        ),
        (
            _config({"s": {"command": "x", "agentbus": {"sandbox": "yes"}}}),
            "f.json: mcpServers.s.agentbus.sandbox: Input should be a valid boolean",
        ),
        (
            _config({"s": {"command": "x", "agentbus": {"sandbox": {"allowedDomains": ["*"]}}}}),
            "f.json: mcpServers.s.agentbus.sandbox.allowedDomains: Value error, network allow-list entry '*'",
        ),
        (
            _config({"s": {"command": "x", "agentbus": {"sandbox": {"readOnlyPaths": ["venv"]}}}}),
            "f.json: mcpServers.s.agentbus.sandbox.readOnlyPaths: Value error, must be absolute paths: 'venv'",
        ),
        (
            _config({"s": {"command": "x", "agentbus": {"sandbox": {"network": True}}}}),
            "f.json: mcpServers.s.agentbus.sandbox.network: Extra inputs are not permitted",
        ),
    ],
)
def test_a_bad_config_is_one_located_error(text: str, message: str) -> None:
    with pytest.raises(McpConfigError) as raised:
        parse_mcp_config(text, source="f.json", env={})
    assert str(raised.value).startswith(message), str(raised.value)


def test_a_stdio_server_is_sandboxed_by_its_entry_else_by_the_deployments_default() -> None:
    """Issue 28: ``"agentbus": {"sandbox": …}`` beside Claude Code's fields (kept as they are)."""
    servers = {
        "plain": {"command": "a"},
        "on": {"command": "b", "agentbus": {"sandbox": True}},
        "off": {"command": "c", "agentbus": {"sandbox": False}},
        "net": {
            "command": "d",
            "timeout": 5,
            "agentbus": {
                "perSession": True,
                "sandbox": {"allowedDomains": ["pypi.org"], "deniedDomains": ["x.pypi.org"], "readOnlyPaths": ["/v"]},
            },
        },
        "web": {"type": "http", "url": "http://x", "agentbus": {"sandbox": False}},
    }
    config = parse_mcp_config(_config(servers), source="f", env={}).mcp_servers
    chosen = {default: {n: server_sandbox(s, default=default) for n, s in config.items()} for default in (False, True)}
    assert chosen[False] == {
        "plain": None,
        "on": McpSandboxOptions(),
        "off": None,
        "net": McpSandboxOptions(allowed_domains=["pypi.org"], denied_domains=["x.pypi.org"], read_only_paths=["/v"]),
        "web": None,
    }
    assert chosen[True] == {**chosen[False], "plain": McpSandboxOptions()}
    assert config["net"].model_extra == {"timeout": 5}
    assert config["net"].agentbus.per_session


def test_one_server_name_in_two_files_is_an_error() -> None:
    first = parse_mcp_config(_config({"s": {"command": "a"}}), source="one.json", env={})
    second = parse_mcp_config(_config({"s": {"command": "b"}, "t": {"command": "c"}}), source="two.json", env={})
    with pytest.raises(McpConfigError, match=r"two.json: mcpServers.s: also defined in one.json"):
        merge_mcp_configs([("one.json", first), ("two.json", second)])
    other = parse_mcp_config(_config({"t": {"command": "c"}}), source="two.json", env={})
    assert list(merge_mcp_configs([("one.json", first), ("two.json", other)])) == ["s", "t"]


# --- names and permission rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "tool", "name"),
    [
        ("everything", "get-tiny-image", "mcp__everything__get-tiny-image"),
        ("time", "get_current_time", "mcp__time__get_current_time"),
        ("my.server", "do it/now", "mcp__my_server__do_it_now"),
    ],
)
def test_a_tool_is_named_mcp_server_tool(server: str, tool: str, name: str) -> None:
    assert mcp_tool_name(server, tool) == name


@pytest.mark.parametrize(
    ("rule", "tool", "matches"),
    [
        ("mcp__everything", "mcp__everything__get-tiny-image", True),
        ("mcp__everything__*", "mcp__everything__echo", True),
        ("mcp__everything__echo", "mcp__everything__echo", True),
        ("mcp__everything__echo", "mcp__everything__get-env", False),
        ("mcp__every", "mcp__everything__echo", False),
        ("mcp__web", "mcp__everything__echo", False),
    ],
)
def test_a_rule_names_a_server_or_one_of_its_tools(rule: str, tool: str, matches: bool) -> None:
    assert rule_matches_whole_tool(parse_rule(rule), tool) is matches


# --- results ----------------------------------------------------------------------------------------------


def test_one_text_block_is_the_result_text() -> None:
    output = mcp_tool_output({"content": [{"type": "text", "text": "Echo: hi"}]}, server="s")
    assert (output.content, output.is_error) == ("Echo: hi", False)
    assert output.tool_use_result == [{"type": "text", "text": "Echo: hi"}]


def test_images_and_resources_map_to_blocks() -> None:
    result = {
        "content": [
            {"type": "text", "text": "here:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "A"}},
            {"type": "resource", "resource": {"uri": "mem://p", "mimeType": "image/png", "blob": PNG}},
            {"type": "resource", "resource": {"uri": "mem://z", "mimeType": "application/gzip", "blob": "H4sI"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b", "description": "the b file"},
            {"type": "audio", "data": "UklG", "mimeType": "audio/wav"},
        ]
    }
    output = mcp_tool_output(result, server="srv")
    assert isinstance(output.content, list)
    assert output.content == [
        TextBlock(text="here:"),
        ImageBlock(source={"type": "base64", "media_type": "image/png", "data": PNG}),
        TextBlock(text="[Resource from srv at file:///a.txt] A"),
        ImageBlock(source={"type": "base64", "media_type": "image/png", "data": PNG}),
        TextBlock(text="[Resource from srv at mem://z] (binary content, application/gzip, not shown)"),
        TextBlock(text="[Resource link: b] file:///b (the b file)"),
        TextBlock(text="[Audio from srv: audio/wav, not shown]"),
    ]


def test_structured_content_is_json_text_unless_the_server_sent_text() -> None:
    alone = mcp_tool_output({"content": [], "structuredContent": {"t": 21}}, server="s")
    assert alone.content == '{"t": 21}'
    beside = mcp_tool_output(
        {"content": [{"type": "text", "text": "21 degrees"}], "structuredContent": {"t": 21}}, server="s"
    )
    assert beside.content == "21 degrees"


def test_is_error_is_an_error_result_with_the_servers_text() -> None:
    output = mcp_tool_output({"content": [{"type": "text", "text": "bad zone"}], "isError": True}, server="s")
    assert (output.content, output.is_error, output.tool_use_result) == ("bad zone", True, "Error: bad zone")
    assert mcp_tool_output({"content": [], "isError": True}, server="s").content == "(no error text)"


def test_no_content_says_so() -> None:
    assert mcp_tool_output({"content": []}, server="s").content == "(no content)"


def test_output_over_the_limit_is_cut_with_a_note() -> None:
    output = mcp_tool_output({"content": [{"type": "text", "text": "x" * 5000}]}, server="s", max_chars=1000)
    assert isinstance(output.content, str)
    assert output.content.startswith("x" * 1000 + "\n\n[OUTPUT TRUNCATED - the MCP tool returned 5000 characters")
    assert "x" * 1001 not in output.content


def test_an_image_that_does_not_fit_is_left_out_and_the_note_says_why() -> None:
    result = {
        "content": [{"type": "text", "text": "ok"}, {"type": "image", "data": "A" * 3000, "mimeType": "image/png"}]
    }
    output = mcp_tool_output(result, server="s", max_chars=1000)
    assert isinstance(output.content, str)
    assert output.content.startswith("ok\n\n[OUTPUT TRUNCATED - the MCP tool returned 3002 characters")


def test_progress_is_claude_codes_mcp_progress() -> None:
    assert mcp_progress_data("srv", "op", McpProgress(2, 5, "half")) == {
        "type": "mcp_progress",
        "status": "progress",
        "serverName": "srv",
        "toolName": "op",
        "progress": 2,
        "total": 5,
        "progressMessage": "half",
    }
    assert "total" not in mcp_progress_data("srv", "op", McpProgress(1))
