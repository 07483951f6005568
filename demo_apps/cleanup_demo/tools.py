"""Tool App: the same file creation, as a tool an agent can call."""

from demo_file import create_file
from workrun_sdk import process
from workrun_sdk.tool import tool


@tool(name="create_demo_file", description="Create one temporary demo file.")
def create_demo_file(text: str = "Created by an agent's tool call") -> dict[str, str]:
    result = create_file(text)
    process.resource("file", result["file_path"])  # recorded with this tool call, for its compensation
    return result
