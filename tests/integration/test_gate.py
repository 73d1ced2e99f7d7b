"""The gate that holds a node test's job (tests/e2e/node_stack.py `Gate`): its step waits while the gate is
shut and goes on once the test opens it, here on loopback with bash as a runner's step runs it."""

from __future__ import annotations

import subprocess

from tests.e2e.node_stack import Gate


def step(gate: Gate) -> int:
    """Run the gate's step to its end: its exit status."""
    return subprocess.run(["bash", "-c", gate.step], check=False, timeout=60).returncode


def test_a_gates_step_waits_while_it_is_shut_and_goes_on_once_it_is_open() -> None:
    gate = Gate(host="127.0.0.1", tries=2)  # shut, the step gives up after its two tries
    try:
        assert step(gate) == 1, "the step went on through a shut gate"
        gate.open()
        assert step(gate) == 0, "the step is held at an open gate"
        assert step(gate) == 0, "open for every step that asks"
        gate.close()
        assert step(gate) == 1, "the step went on through a gate shut again"
    finally:
        gate.close()
