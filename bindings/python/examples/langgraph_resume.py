"""LangGraph with a checkpointer and a toolonce write tool: a crash after the tool ran and
before the checkpoint, then a resume, and the side effect happens once. Offline (the "model"
node is scripted).

The graph is plan -> send -> report. The first process is killed (SIGKILL) inside `send`,
after the refund was issued and recorded by toolonce but before LangGraph saved the node's
checkpoint. A second process resumes the thread from its last checkpoint, so `send` runs
again: toolonce replays the stored result instead of issuing a second refund.

    python examples/langgraph_resume.py [STORE_URL]   # default: a SQLite file in a temp dir

Needs, beside toolonce (``pip install ./bindings/python``), LangGraph and its SQLite
checkpointer:

    pip install -r requirements-examples.txt   # langgraph==1.2.24, langgraph-checkpoint-sqlite
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

import toolonce


class State(TypedDict, total=False):
    request: str
    tool_args: dict
    refund: dict
    outcome: str
    report: str


def build_graph(store: toolonce.Store, workdir: Path, crash: bool):
    outbox = workdir / "refunds.log"  # the side effect, outside both processes

    @toolonce.write(store, name="issue_refund")
    def issue_refund(order_id: str, cents: int) -> dict:
        # A real tool would send toolonce.current_key() to the payment API.
        with outbox.open("a") as f:
            f.write(f"refund {order_id} {cents}\n")
        return {"refund_id": f"re_{order_id}", "cents": cents}

    def plan(state: State) -> State:
        # Stands in for the model choosing a tool call.
        return {"tool_args": {"order_id": "o-1042", "cents": 2500}}

    def send(state: State, config) -> State:
        thread = config["configurable"]["thread_id"]
        # call_detailed: the result plus toolonce's outcome (executed, replayed, ...).
        answer = issue_refund.call_detailed(**state["tool_args"], scope=thread)
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # after the tool, before the checkpoint
        return {"refund": answer.unwrap(), "outcome": answer.outcome}

    def report(state: State) -> State:
        return {"report": f"Refunded {state['refund']['cents']} cents ({state['refund']['refund_id']})."}

    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("send", send)
    graph.add_node("report", report)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "send")
    graph.add_edge("send", "report")
    graph.add_edge("report", END)
    checkpoints = sqlite3.connect(workdir / "checkpoints.db", check_same_thread=False)
    return graph.compile(checkpointer=SqliteSaver(checkpoints))


def child(url: str, workdir: Path, mode: str) -> Optional[State]:
    config = {"configurable": {"thread_id": "refund-thread-7"}}
    with toolonce.open_store(url) as store:
        graph = build_graph(store, workdir, crash=(mode == "crash"))
        if mode == "crash":
            # durability="sync": each step's checkpoint is written before the next step runs
            # (the default, "async", may still be writing `plan`'s when `send` kills us).
            graph.invoke({"request": "Refund order o-1042"}, config, durability="sync")
            raise AssertionError("unreachable: the process kills itself in `send`")
        # Resume: no new input, continue the thread from its last checkpoint.
        state = graph.invoke(None, config, durability="sync")
        print(f"send on resume: {state['outcome']}")
        print(state["report"])
        return state


def main(url: str) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="toolonce-langgraph-"))
    crashed = subprocess.run([sys.executable, __file__, "--child", "crash", url, str(workdir)])
    assert crashed.returncode == -signal.SIGKILL, crashed.returncode
    refunds = (workdir / "refunds.log").read_text().splitlines()
    assert refunds == ["refund o-1042 2500"], refunds
    resumed = subprocess.run(
        [sys.executable, __file__, "--child", "resume", url, str(workdir)],
        capture_output=True, text=True,
    )
    print(resumed.stdout.strip())
    if resumed.returncode != 0:
        print(resumed.stderr, file=sys.stderr)
    refunds = (workdir / "refunds.log").read_text().splitlines()
    ok = resumed.returncode == 0 and set(refunds) == {"refund o-1042 2500"}
    ok &= "Refunded 2500 cents (re_o-1042)." in resumed.stdout
    ok &= "send on resume: replayed" in resumed.stdout  # the node ran again; the tool did not
    print(f"effects: {len(refunds)} (expected 1)")
    return 0 if ok and len(refunds) == 1 else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[3], Path(sys.argv[4]), sys.argv[2])
    else:
        if len(sys.argv) > 1:
            store_url = sys.argv[1]
        else:
            store_url = f"sqlite://{Path(tempfile.mkdtemp()) / 'toolonce.db'}"
        sys.exit(main(store_url))
