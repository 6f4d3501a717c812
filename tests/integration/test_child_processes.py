"""`leasecron.testing.ChildProcess` with real processes (no cluster): JSON lines reach the
callback and nothing else does, stdin closes before any signal, a child that ignores SIGTERM
or is stopped is still ended, and a child dies with its parent."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from leasecron.testing import ChildProcess, poll, stop_children

PRINTS = """
import json, sys
print(json.dumps({"event": "a"}))
print("not json")
print("[1, 2]")
print("oops", file=sys.stderr)
print(json.dumps({"event": "b"}))
"""
ECHOES = """
import json, sys
for line in sys.stdin:
    print(json.dumps({"event": "echo", "text": line.strip()}), flush=True)
"""
IGNORES_TERM = """
import json, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(json.dumps({"event": "ready"}), flush=True)
while True:
    time.sleep(1)
"""


class Collected:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        self.eof = False

    def on_line(self, data: dict[str, Any], _received: float) -> None:
        with self.changed:
            self.lines.append(data)
            self.changed.notify_all()

    def on_eof(self) -> None:
        with self.changed:
            self.eof = True
            self.changed.notify_all()

    def wait_for(self, event: str) -> None:
        with self.changed:
            assert self.changed.wait_for(
                lambda: any(x.get("event") == event for x in self.lines), timeout=30
            ), self.lines


def start(tmp_path: Path, code: str, seen: Collected, *, stdin: bool = False) -> ChildProcess:
    return ChildProcess(
        name="child",
        argv=[sys.executable, "-c", textwrap.dedent(code)],
        log_path=tmp_path / "child.log",
        stdin=stdin,
        on_line=seen.on_line,
        on_eof=seen.on_eof,
    )


def test_json_objects_on_stdout_reach_on_line_and_other_lines_are_skipped(
    tmp_path: Path,
) -> None:
    seen = Collected()
    child = start(tmp_path, PRINTS, seen)
    assert child.wait_exit(timeout=30) == 0
    assert child.join_reader(timeout=30)
    assert [x["event"] for x in seen.lines] == ["a", "b"]
    assert seen.eof
    assert child.log_tail(lines=1) == "oops"


def test_a_child_that_exits_when_stdin_closes_is_stopped_without_a_signal(
    tmp_path: Path,
) -> None:
    seen = Collected()
    child = start(tmp_path, ECHOES, seen, stdin=True)
    child.send({"n": 1})
    seen.wait_for("echo")
    assert seen.lines[0]["text"] == '{"n": 1}'
    assert child.stop(grace=30) == 0


def test_children_that_ignore_sigterm_are_killed_after_the_grace_period(tmp_path: Path) -> None:
    children = []
    for index in range(2):
        seen = Collected()
        children.append(start(tmp_path / str(index), IGNORES_TERM, seen))
        seen.wait_for("ready")
    stop_children(children, grace=0.5)
    assert [c.returncode for c in children] == [-signal.SIGKILL, -signal.SIGKILL]


def test_a_stopped_child_is_killed(tmp_path: Path) -> None:
    seen = Collected()
    child = start(tmp_path, IGNORES_TERM, seen)
    seen.wait_for("ready")
    child.signal(signal.SIGSTOP)
    child.kill()
    assert child.returncode == -signal.SIGKILL
    assert child.join_reader(timeout=30)


PARENT = """
import json, sys, time
from pathlib import Path
from leasecron.testing import ChildProcess
child = ChildProcess(
    name="grandchild",
    argv=[sys.executable, "-c", "import time; time.sleep(600)"],
    log_path=Path(sys.argv[1]),
)
print(json.dumps({"event": "started", "pid": child.pid}), flush=True)
time.sleep(600)
"""


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    seen = Collected()
    parent = ChildProcess(
        name="parent",
        argv=[sys.executable, "-c", PARENT, str(tmp_path / "grandchild.log")],
        log_path=tmp_path / "parent.log",
        on_line=seen.on_line,
    )
    seen.wait_for("started")
    grandchild = int(seen.lines[0]["pid"])
    # setpriv arms the parent-death signal, then execs the program: wait for the exec.
    poll(lambda: _cmdline(grandchild).startswith(sys.executable.encode()), timeout=30, what="exec")
    assert _running(grandchild)
    os.kill(parent.pid, signal.SIGKILL)  # no cleanup in the parent: only the kernel can help
    parent.wait_exit(timeout=30)
    # Another process's end: nothing to wait on but its /proc entry.
    poll(lambda: not _running(grandchild), timeout=30, what="the grandchild gone")


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
