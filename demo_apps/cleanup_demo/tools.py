"""Tool App: the same file creation, as a tool an agent can call."""

from demo_file import create_file
from workrun_sdk.tool import tool


@tool(name="create_demo_file", description="Create one temporary demo file.")
def create_demo_file(text: str = "Created by an agent's tool call") -> dict[str, str]:
    return create_file(text)
