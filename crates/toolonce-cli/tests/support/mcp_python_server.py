"""A Streamable HTTP MCP server built on the official Python SDK (PyPI `mcp`, the version in
python-requirements.txt), for the tests of `toolonce mcp --upstream` and `--listen --upstream`.

Tools: `write` (no annotations: a write) reports progress when the client asked for it, then
appends one JSON line `{item, key}` to COUNT_FILE (the key is the `toolonce/key` the proxy put
in `_meta`) and says which execution it was; `read` (readOnlyHint) says how many writes ran.
Environment: COUNT_FILE, JSON (`1`: JSON answers instead of SSE). It listens on a free
loopback port and prints `PORT=<n>` once it does.
"""

import asyncio
import json
import os
import socket
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

COUNT_FILE = os.environ["COUNT_FILE"]

server = MCPServer(name="toolonce-python-test", version="1.0.0", log_level="WARNING")


def executions() -> int:
    try:
        with open(COUNT_FILE, encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


@server.tool(description="Records an item (a side effect).")
async def write(item: str, ctx: Context) -> str:
    await ctx.report_progress(1, 2, "writing")
    meta = ctx.request_context.meta
    key = meta.get("toolonce/key") if meta else None
    with open(COUNT_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"item": item, "key": key}) + "\n")
    await ctx.report_progress(2, 2, "written")
    return f"wrote {item} (execution {executions()})"


@server.tool(description="Says how many writes ran.", annotations=ToolAnnotations(readOnlyHint=True))
def read() -> str:
    return str(executions())


async def main() -> None:
    app = server.streamable_http_app(json_response=os.environ.get("JSON") == "1")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is said: a client that connects before uvicorn has started
    # waits in the backlog instead of being refused.
    sock.listen(128)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    print(f"PORT={sock.getsockname()[1]}", flush=True)
    await http.serve(sockets=[sock])


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
