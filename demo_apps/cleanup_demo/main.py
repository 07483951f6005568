"""Process App: create one temporary demo file and return its path."""

from demo_file import create_file
from workrun_sdk import process

if __name__ == "__main__":
    data = process.input()
    result = create_file(str(data.get("text") or "Created by this workflow run"))
    process.resource("file", result["file_path"])
    print(f"created {result['file_path']}")
    process.result(result)
