"""Issue 30: the console in a real browser over a running bus — a reply streams into the session page, tool
calls waiting for approval are allowed (with an edited input) and denied from the approvals page, an
interrupt from the page ends the turn, a dead letter is replayed, and nothing opens without the token (nor
acts without the login's CSRF token)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from agentbus_redis.bus.events import UserPrompt
from agentbus_redis.messages.constants import REJECT_MESSAGE_WITH_REASON_PREFIX
from agentbus_redis.streams.deadletter import DeadLetter, list_dead_letters
from agentbus_redis.streams.names import dead_letter_stream
from tests.integration.approval_helpers import ran, result_block, result_for, transcript_result
from tests.integration.cluster import WorkerCluster, eventually
from tests.integration.console.conftest import OPERATOR_TOKEN, READ_ONLY_TOKEN, screenshot
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import ended_with, reply, text, tool_use, turn_ended, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ANSWER = (
    "The workspace holds one README. It says <b>agentbus</b> is a bus for agent backends & nothing else yet; "
    "every word of this sentence streams into the page as the model writes it."
)
"""Markup in the model's text must show as text (the page renders nothing a model writes as HTML)."""


def _session(kind: str) -> str:
    return f"console-{kind}-{uuid.uuid4().hex[:8]}"


async def open_session(page: Page, session: str) -> None:
    await page.goto(f"/#/session/{session}")
    await page.wait_for_selector("#prompt")


async def test_a_reply_streams_into_the_session_page(
    page: Page, module_cluster: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = _session("stream")
    fake.script(session, [reply(text(ANSWER), chunk_delay_ms=120)])
    await open_session(page, session)
    await page.fill("#prompt", "what is this workspace?")
    await page.click("#send")
    # The text shows while it streams (a live block), then as the logged reply that replaces it.
    live = page.locator(".row-live").first
    await expect(live).to_contain_text("The workspace", timeout=60_000)
    partial = await live.text_content()
    assert partial is not None
    assert ANSWER not in partial
    reply_row = page.locator(".row-text", has_text="nothing else yet")
    await expect(reply_row).to_have_count(1, timeout=60_000)
    assert ANSWER in (await reply_row.text_content() or "")
    assert await page.locator("#conversation b").count() == 0
    await expect(page.locator(".row-live")).to_have_count(0)
    await expect(page.locator(".row-user", has_text="what is this workspace?")).to_have_count(1)
    await expect(page.locator("[data-testid=state]").first).to_have_text("ended", timeout=30_000)
    await expect(page.locator("#usage")).to_contain_text("claude-sonnet-4-6", timeout=30_000)
    async with module_cluster.client() as bus:
        await wait_for(bus, session, turn_ended)
    await screenshot(page, "session")
    # The transcript downloads as JSONL lines of the session's messages.
    async with page.expect_download() as download_info:
        await page.click("#transcript")
    download = await download_info.value
    lines = [json.loads(line) for line in Path(await download.path()).read_text(encoding="utf-8").splitlines()]
    assert [line["type"] for line in lines][:2] == ["user", "assistant"]
    # The sessions page lists it, found by its id.
    await page.goto(f"/#/sessions?q={session}")
    await expect(page.locator(f"tr[data-session='{session}']")).to_have_count(1)
    await page.goto("/#/sessions")
    await page.wait_for_selector("#sessions")
    await screenshot(page, "sessions")


async def _ask(fake: FakeModelProcess, bus_page: Page, session: str, file: str, *, then: str) -> str:
    """Script a Bash call that asks (its command appends to ``file``), start the turn from the page; the call's id."""
    call_id = f"toolu_{uuid.uuid4().hex[:10]}"
    fake.script(session, [reply(tool_use(call_id, "Bash", command=f"printf x >> {file}")), reply(text(then))])
    await open_session(bus_page, session)
    await bus_page.fill("#prompt", "append to the file")
    await bus_page.click("#send")
    await expect(bus_page.locator(f"[data-tool-use='{call_id}']")).to_have_count(1, timeout=60_000)
    return call_id


async def test_an_approval_allowed_from_the_page_runs_the_edited_input_once(
    page: Page, module_cluster: WorkerCluster, fake: FakeModelProcess
) -> None:
    session, file = _session("allow"), f"console-{uuid.uuid4().hex[:6]}.txt"
    call_id = await _ask(fake, page, session, file, then="Appended.")
    await expect(page.locator("[data-testid=state]").first).to_have_text("waiting approval", timeout=30_000)
    # The sessions page filtered by state lists it (the state index ingestion keeps).
    await page.goto("/#/sessions?state=waiting_approval")
    await expect(page.locator(f"tr[data-session='{session}']")).to_have_count(1, timeout=30_000)
    await page.goto("/#/approvals")
    card = page.locator(".approval", has=page.locator(f"a:text('{session}')"))
    await expect(card).to_have_count(1, timeout=30_000)
    await expect(card).to_contain_text(f"printf x >> {file}")
    await screenshot(page, "approvals")
    await card.locator(".approval-input").fill(json.dumps({"command": f"printf yy >> {file}"}))
    await card.locator("[data-action=allow]").click()
    await expect(card).to_have_count(0, timeout=30_000)  # the queue updates itself
    async with module_cluster.client() as bus:
        message = await result_for(bus, session, call_id)
        assert result_block(message).is_error is None
        await wait_for(bus, session, ended_with("Appended."))
    assert ran(module_cluster, file) == "yy"  # the edited input, run once
    # Ingestion moved it from the waiting-for-approval index to the ended one.
    await page.goto("/#/sessions?state=ended")
    await expect(page.locator(f"tr[data-session='{session}']")).to_have_count(1, timeout=30_000)
    await page.goto("/#/sessions?state=waiting_approval")
    await page.wait_for_selector("#sessions")
    await expect(page.locator(f"tr[data-session='{session}']")).to_have_count(0)


async def test_an_approval_denied_from_the_page_leaves_the_deny_text_in_the_transcript(
    page: Page, module_cluster: WorkerCluster, fake: FakeModelProcess
) -> None:
    session, file = _session("deny"), f"console-{uuid.uuid4().hex[:6]}.txt"
    call_id = await _ask(fake, page, session, file, then="Understood, I will not.")
    await page.goto("/#/approvals")
    card = page.locator(".approval", has=page.locator(f"a:text('{session}')"))
    await expect(card).to_have_count(1, timeout=30_000)
    await card.locator(".approval-message").fill("use the staging db")
    await card.locator("[data-action=deny]").click()
    await expect(card).to_have_count(0, timeout=30_000)
    block, _ = await transcript_result(module_cluster, session, call_id)
    assert block["is_error"] is True
    assert block["content"] == REJECT_MESSAGE_WITH_REASON_PREFIX + "use the staging db"
    assert ran(module_cluster, file) == ""
    async with module_cluster.client() as bus:
        await wait_for(bus, session, ended_with("Understood, I will not."))


async def test_an_interrupt_from_the_page_ends_the_turn(
    page: Page, module_cluster: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = _session("interrupt")
    long_answer = " ".join(f"word{n}" for n in range(400))
    fake.script(session, [reply(text(long_answer), chunk_delay_ms=150)])
    await open_session(page, session)
    await page.fill("#prompt", "tell me a long story")
    await page.click("#send")
    await expect(page.locator(".row-live").first).to_contain_text("word1", timeout=60_000)
    await page.click("#interrupt")
    async with module_cluster.client() as bus:
        history = await wait_for(bus, session, turn_ended, timeout_s=60)
    assert not any(long_answer in json.dumps(entry.message.to_wire()) for entry in history)
    await expect(page.locator(".row-user", has_text="[Request interrupted by user")).to_have_count(1, timeout=30_000)
    await expect(page.locator("[data-testid=state]").first).to_have_text("ended", timeout=30_000)


async def test_a_dead_letter_is_replayed_from_the_page(page: Page, module_cluster: WorkerCluster) -> None:
    session = _session("dlq")
    async with module_cluster.client() as bus:
        ingress = bus.topology.ingress_for(session)
        # An entry that failed while its cause lasted (here: as if ingestion had crashed on it), fixed since.
        fields = bus._ingress_fields(session, f"k-{uuid.uuid4()}", UserPrompt(content="replayed after the fix"))
        letter = DeadLetter(
            stream=ingress,
            group="ingestion",
            entry_id="1-0",
            consumer="ingestion-test",
            delivery_count=4,
            reason="handler_error",
            detail="RuntimeError: the ledger store was down",
            at_ms=int(time.time() * 1000),
            fields=dict(fields),
        )
        dlq = dead_letter_stream(ingress)
        await bus.redis.xadd(dlq, letter.to_stream_fields())  # type: ignore[arg-type]
        await page.goto("/#/dead-letters")
        row = page.locator("#dead-letters tr", has_text="the ledger store was down")
        await expect(row).to_have_count(1, timeout=30_000)
        await screenshot(page, "dead-letters")
        await row.locator("[data-action=replay]").click()
        await expect(row).to_have_count(0, timeout=30_000)

        async def replayed() -> bool:
            history = await bus.history(session)
            return any("replayed after the fix" in json.dumps(e.message.to_wire()) for e in history)

        await eventually(replayed, timeout_s=30)
        assert [letter for letter in await list_dead_letters(bus.redis, dlq) if letter.stream == ingress] == []


async def test_the_bus_page_shows_workers_owners_streams_and_tools(page: Page) -> None:
    await page.goto("/#/bus")
    await expect(page.locator("#tools")).to_contain_text("Bash", timeout=30_000)
    await expect(page.locator("#streams")).to_contain_text("ingress")
    await expect(page.locator(".cards")).to_contain_text("ingestion")
    await screenshot(page, "bus")


def _status(request: urllib.request.Request, opener: urllib.request.OpenerDirector | None = None) -> int:
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return error.code


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


async def test_nothing_opens_without_the_token_and_no_action_without_csrf(
    console: str, page: Page, module_cluster: WorkerCluster
) -> None:
    session = _session("refused")
    prompt = json.dumps({"text": "hi"}).encode()
    # No token: the API answers 401, the page sends the browser to the login form.
    assert _status(urllib.request.Request(f"{console}/api/sessions")) == 401
    assert _status(urllib.request.Request(f"{console}/api/bus")) == 401
    no_redirect = urllib.request.build_opener(_NoRedirect)
    assert _status(urllib.request.Request(f"{console}/"), no_redirect) == 303
    wrong = urllib.request.Request(f"{console}/api/sessions", headers={"Authorization": "Bearer not-the-token"})
    assert _status(wrong) == 401
    # A read-only token looks, and may not act.
    read_only = {"Authorization": f"Bearer {READ_ONLY_TOKEN}"}
    assert _status(urllib.request.Request(f"{console}/api/sessions", headers=read_only)) == 200
    send = f"{console}/api/sessions/{session}/prompt"
    assert _status(urllib.request.Request(send, prompt, {**read_only, "content-type": "application/json"})) == 403
    # A logged-in browser's cookie without the CSRF token acts on nothing (what a cross-site form would send).
    jar = CookieJar()
    with_cookies = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect)
    login = urllib.request.Request(f"{console}/login", f"token={OPERATOR_TOKEN}".encode(), method="POST")
    assert _status(login, with_cookies) == 303
    assert any(cookie.name == "agentbus_console" and OPERATOR_TOKEN not in str(cookie.value) for cookie in jar)
    json_type = {"content-type": "application/json"}
    assert _status(urllib.request.Request(send, prompt, json_type), with_cookies) == 403
    wrong_csrf = {**json_type, "x-csrf-token": "0" * 64}
    assert _status(urllib.request.Request(send, prompt, wrong_csrf), with_cookies) == 403
    async with module_cluster.client() as bus:
        assert await bus.history(session) == []
    # In the browser: the login page refuses a wrong token; no page shows a token.
    await page.goto("/login")
    await screenshot(page, "login")
    await page.fill("#token", "not-the-token")
    await page.click("#login-button")
    await expect(page.locator("#login-failed")).to_be_visible()
    await page.goto("/#/bus")
    await page.wait_for_selector("#streams")
    assert OPERATOR_TOKEN not in await page.content()
