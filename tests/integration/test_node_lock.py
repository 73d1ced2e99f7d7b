"""One node at a time on a machine: the lock a node holds from its start to its stop (tests/node/host.py)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from tests.node.host import hold_the_machine

HOLDER = """
import sys
from pathlib import Path
from tests.node.host import hold_the_machine
held = hold_the_machine(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.readline()
held.close()
print("let go", flush=True)
sys.stdin.readline()
"""


def taken(path: Path) -> bool:
    """Whether another process holds the machine (a try that does not wait)."""
    with path.open("ab") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def test_a_node_holds_the_machine_until_it_lets_go_and_then_another_may_start(tmp_path: Path) -> None:
    path = tmp_path / "node.lock"
    root = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        assert taken(path), "a second node could start beside the first"
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "let go\n"
        assert not taken(path)
        mine = hold_the_machine(path)
        mine.close()
    finally:
        holder.kill()
        holder.wait()
