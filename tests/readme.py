"""The README's quick start as the tests read it: its commands come from the README itself, so a drift
between the README and what the tests run fails them. TEST HARNESS ONLY."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start() -> tuple[list[str], str]:
    """The quick start's commands (continuation lines joined, comments cut, the `export`s of the reader's
    values left out) and the section's text."""
    text = README.read_text()
    section = text[text.index("## Quick start") : text.index("\n## ", text.index("## Quick start") + 1)]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert block, "the quick start has no sh block"
    commands = []
    for line in block.group(1).replace("\\\n", " ").splitlines():
        if line.strip() and not line.startswith(("export ", "#")):
            commands.append(line)
    return commands, section


def step(command: str) -> int:
    """The number a quick start command gives itself (`# 3. the chart`)."""
    found = re.search(r"# (\d)\. ", command)
    assert found, f"a quick start command without its number: {command}"
    return int(found.group(1))


def plain_http(command: str) -> str:
    """A command without its comment, with `--plain-http` where the README says to add it for an HTTP
    registry ("add --plain-http to both commands")."""
    command = command.split("  #")[0].strip()
    return command + " --plain-http" if command.startswith(("deploy/release.sh", "helm install")) else command
