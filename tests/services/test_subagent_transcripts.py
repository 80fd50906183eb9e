"""A4: a child session's lines go to ``<root>/subagents/agent-<agentId>.jsonl`` with ``isSidechain: true``,
``agentId`` and the root's ``sessionId`` on every line; the chain starts at ``parentUuid: null``, survives a
reopen (the store re-reads the sidechain tail), a redelivered batch writes nothing twice, and
``agentbus normalize`` / ``transcript verify`` read the file."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.cli.transcript import app
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.session_ids import claude_session_id
from agentbus_redis.transcript import read_transcript, verify_transcript
from agentbus_redis.transcript_files.api_view import api_view_of_transcript
from agentbus_redis.transcript_files.layout import session_file
from agentbus_redis.transcript_files.store import TranscriptStore

CWD = "/agentbus"


async def test_a4_child_session_lines_are_sidechain_lines_in_the_root_sessions_subagents_dir(tmp_path: Path) -> None:
    root = "root-1"
    child = child_session_id(root, agent_id_for(root, "toolu_1"))
    grandchild = child_session_id(child, agent_id_for(child, "toolu_2"))
    prompt, answer = create_user_message("Find it"), create_assistant_message("Found it.")
    store = TranscriptStore(tmp_path)
    await store.record(root, [create_user_message("go")], cwd=CWD, continue_chain=True)
    await store.record(child, [prompt], cwd=CWD, continue_chain=True)
    await store.close()
    store = TranscriptStore(tmp_path)  # reopened: the chain continues from the sidechain's tail
    await store.record(child, [prompt, answer], cwd=CWD, continue_chain=True)  # the prompt redelivered
    await store.record(grandchild, [create_user_message("deeper")], cwd=CWD, continue_chain=True)
    await store.close()

    subagents = session_file(tmp_path, CWD, root).with_suffix("") / "subagents"
    path = subagents / f"agent-{agent_id_for(root, 'toolu_1')}.jsonl"
    assert store.subagent_path(child, CWD) == path
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["uuid"] for line in lines] == [prompt.uuid, answer.uuid]
    assert [line["parentUuid"] for line in lines] == [None, prompt.uuid]
    assert all(line["isSidechain"] is True for line in lines)
    assert {line["agentId"] for line in lines} == {agent_id_for(root, "toolu_1")}
    assert {line["sessionId"] for line in lines} == {claude_session_id(root)}  # the root file's name
    assert (subagents / f"agent-{agent_id_for(child, 'toolu_2')}.jsonl").exists()  # nested: under the root too
    assert not session_file(tmp_path, CWD, child).exists()

    data = path.read_bytes()
    assert verify_transcript(read_transcript(data)).ok
    view = api_view_of_transcript(data)
    assert view.messages_body["messages"][0] == {"role": "user", "content": "Find it"}

    # `transcript verify --tree` checks the session file and each sub-agent file; one broken file fails it.
    runner = CliRunner()
    main = session_file(tmp_path, CWD, root)
    result = runner.invoke(app, ["verify", "--tree", str(main)])
    assert result.exit_code == 0, result.output
    assert [line.split(":")[0] for line in result.output.splitlines() if ": OK:" in line] == [
        str(main),
        *sorted(str(p) for p in subagents.glob("agent-*.jsonl")),
    ]
    path.write_text(path.read_text() + "{not json\n")
    assert runner.invoke(app, ["verify", "--tree", str(main)]).exit_code == 1
