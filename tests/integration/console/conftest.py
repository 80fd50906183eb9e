"""The console end to end: every worker as a process (the model worker on the fake model server), the
console worker, and a real headless Chromium (Debian's ``chromium``) driven by Playwright — no browser is
downloaded. Screenshots of each page go to docs/assets/console/ when AGENTBUS_DOCS_SCREENSHOTS=1."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.integration.approval_helpers import APPROVE_ENV
from tests.integration.cluster import WorkerCluster
from tests.integration.fake_model import FakeModelProcess

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[3] / "docs" / "assets" / "console"
OPERATOR_TOKEN = secrets.token_urlsafe(24)
READ_ONLY_TOKEN = secrets.token_urlsafe(24)

if shutil.which(CHROMIUM) is None:  # pragma: no cover - .ci/run installs it
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def console(module_cluster: WorkerCluster, fake: FakeModelProcess) -> str:
    """Every worker and the console; the console's base URL."""
    module_cluster.extra_env.update(
        {
            **APPROVE_ENV,
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_CONSOLE__TOKEN": OPERATOR_TOKEN,
            "AGENTBUS_CONSOLE__READ_ONLY_TOKEN": READ_ONLY_TOKEN,
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    (console_worker,) = module_cluster.start("console")
    module_cluster.wait_ready(timeout_s=240)
    return f"http://127.0.0.1:{console_worker.port}"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        # --no-sandbox: the suite runs as root in CI, where Chromium's own sandbox refuses to start.
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser, console: str) -> AsyncIterator[Page]:
    """A page logged in with the operator token."""
    context = await browser.new_context(base_url=console, viewport={"width": 1280, "height": 860})
    opened = await context.new_page()
    await opened.goto("/login")
    await opened.fill("#token", OPERATOR_TOKEN)
    await opened.click("#login-button")
    await opened.wait_for_selector("#sessions")
    try:
        yield opened
    finally:
        await context.close()


async def screenshot(page: Page, name: str) -> None:
    """Save the page for the docs (docs/how-to/console.md) when asked: the suite does not touch the tree."""
    if os.environ.get("AGENTBUS_DOCS_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
