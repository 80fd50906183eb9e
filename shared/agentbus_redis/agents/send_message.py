"""``SendMessage`` (agent-loop.md A4.4): continue a sub-agent this session started.

The spec names the tool (A5.2/A5.3 tell the model "use SendMessage with to: '<id>' to continue this
agent") but not its input schema; we take the minimal ``{to, message}`` (agentbus). The message becomes
the child's next prompt in its own session (its history is on the bus already, and its transcript file
continues from its latest leaf, A4.4); its end answers the SendMessage call as the Agent call was
answered (A5: sync), or, for a background child, at once and with a notification later (A5.3/A5.4).
Error texts are agentbus's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentbus_redis.tools.definitions import ToolDefinition

SEND_MESSAGE_TOOL_NAME = "SendMessage"


class SendMessageInput(BaseModel):
    """``{to: <agentId>, message: <the child's next prompt>}`` (unknown keys refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    to: str = Field(min_length=1)
    message: str = Field(min_length=1)


SEND_MESSAGE_DESCRIPTION = (
    "Send a message to an agent you started with the Agent tool, to continue it with its full context. "
    "`to` is the agentId from the Agent tool's result. The agent must have finished its current task. "
    "A foreground agent's reply returns as this tool's result; a background agent continues in the background "
    "and you are notified automatically when it completes."
)


def send_message_tool_definition() -> ToolDefinition:
    """M1.8: ``{name: "SendMessage", description, input_schema}``."""
    return ToolDefinition(
        name=SEND_MESSAGE_TOOL_NAME,
        description=SEND_MESSAGE_DESCRIPTION,
        input_schema={
            "type": "object",
            "properties": {
                "to": {"type": "string", "description": "The agentId of the agent to continue"},
                "message": {"type": "string", "description": "The message to send to the agent"},
            },
            "required": ["to", "message"],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
    )


def unknown_agent(agent_id: str) -> str:
    return f"No agent with agentId '{agent_id}' exists. Use the agentId from an Agent tool result."


def not_a_child(agent_id: str) -> str:
    return f"Agent '{agent_id}' was not started by this session: only agents you started can be continued."


def still_running(agent_id: str) -> str:
    return (
        f"Agent '{agent_id}' is still running. Wait for its result (or its task notification) before sending it "
        "another message."
    )


def continued_in_background_text(agent_id: str, *, output_file: str) -> str:
    """The immediate result of a message to a background child (agentbus, in the words of A5.3)."""
    return (
        f"Message sent to agent {agent_id}. The agent is working in the background. You will be notified "
        f"automatically when it completes.\noutput_file: {output_file}"
    )
