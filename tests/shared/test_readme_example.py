"""The README's worked example runs and prints what the README says (R4.7, R4.28, API §1.8)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_worked_example_output_is_true() -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("Worked example", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    code = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("#"))
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(code, "README.md", "exec"), {})
    printed = output.getvalue()
    placeholder = r"'tool_use_id': 't1', 'content': '\[Tool result missing due to internal error\]', 'is_error': True\}"
    assert re.search(placeholder + r", \{'type': 'tool_result', 'tool_use_id': 't2', 'content': '3'\}", printed)
    assert "'text': ''" not in printed
    assert printed.count("'role': 'assistant'") == 1
