# /// script
# requires-python = ">=3.11"
# dependencies = ["a2a-sdk[http-server]>=1.3,<2", "uvicorn>=0.30"]
# ///
"""A tiny A2A agent for the ``remote_agent`` node tutorial (``demo_apps/workflows/remote.toml``).

Run it (``uv`` reads the dependencies above), then run the workflow in another shell::

    uv run demo_apps/remote_agent.py --port 9999
    workrun run demo_apps/workflows/remote.toml

What it does with the text it is sent:

- ``sleep N rest``: works for N seconds, then completes (a ``tasks/cancel`` ends it early);
- anything else: completes at once with the upper-cased text as a text artifact.

It prints one line per task and per cancel request so you can see Workrun's
single best-effort cancel (R-C10) arrive.
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette


class DemoExecutor(AgentExecutor):
    """Upper-cases the text, or works ``sleep N`` seconds first."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        print(f"task {task.id}: {text!r}", flush=True)
        words = text.split(maxsplit=2)
        if len(words) >= 2 and words[0] == "sleep":
            await asyncio.sleep(float(words[1]))
            text = words[2] if len(words) > 2 else ""
        await updater.add_artifact([new_text_part(text.upper())], name="answer")
        await updater.complete(new_text_message(f"done: {text.upper()}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        print(f"cancel requested for task {context.task_id}", flush=True)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def build_app(url: str, executor: AgentExecutor | None = None) -> Starlette:
    """The Starlette app: agent card at ``/.well-known/agent-card.json``, JSON-RPC at ``/``."""
    card = AgentCard(
        name="workrun demo agent", description="Upper-cases text; 'sleep N text' works N seconds first.",
        version="0.1.0", default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        capabilities=AgentCapabilities(streaming=False),
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        skills=[AgentSkill(id="upper", name="upper", description="Upper-case text", tags=["demo"])],
    )
    handler = DefaultRequestHandler(agent_executor=executor or DemoExecutor(), task_store=InMemoryTaskStore(),
                                    agent_card=card)
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9999)
    args = parser.parse_args()
    uvicorn.run(build_app(f"http://{args.host}:{args.port}/"), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
