"""The wheel's `dsh_mcp` module under the MCP Python SDK's stdio client.

Run by `.ci/wheel` in a venv where the wheel and `mcp` are installed, with a
workspace directory and the crate's version as arguments, then optionally
`--baseline BINARY` (another dsh-mcp, say `cargo install`'s) for the latency
figures. Starts the server through `dsh_mcp.binary()` and
`dsh_mcp.stdio_args()`, calls both tools (the shell's state kept between
calls), checks `dsh-mcp --version`; prints the first call's latency (start,
initialize, one `bash` call) for the wheel's binary and the baseline, the
median of 5 each, interleaved. Exits non-zero with the reason on a failed
check.
"""

import asyncio
import os
import statistics
import subprocess
import sys
import time

import dsh_mcp
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

WORKSPACE, VERSION = sys.argv[1:3]
BASELINE = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--baseline" else None


def text(result):
    return "".join(c.text for c in result.content if c.type == "text")


async def bash(session, command):
    result = await session.call_tool("bash", {"command": command})
    assert not result.is_error, text(result)
    return text(result)


async def both_tools():
    params = StdioServerParameters(command=dsh_mcp.binary(), args=dsh_mcp.stdio_args(WORKSPACE))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            info = await session.initialize()
            assert info.server_info.name == "dsh-mcp", info
            assert info.server_info.version == VERSION, (info.server_info.version, VERSION)
            names = sorted(t.name for t in (await session.list_tools()).tools)
            assert names == ["bash", "str_replace_editor"], names
            assert await bash(session, "pwd") == WORKSPACE
            assert await bash(session, "cd /tmp && export KEPT=1") == ""
            assert await bash(session, "echo $PWD $KEPT") == "/tmp 1"
            path = os.path.join(WORKSPACE, "made.txt")
            made = await session.call_tool(
                "str_replace_editor",
                {"command": "create", "path": path, "file_text": "alpha\n"},
            )
            assert not made.is_error, text(made)
            assert await bash(session, f"cat {path}") == "alpha"


async def first_call(binary):
    """Seconds from the server's start to the answer of its first call."""
    params = StdioServerParameters(command=binary, args=dsh_mcp.stdio_args(WORKSPACE))
    started = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            assert await bash(session, "echo first") == "first"
            return time.perf_counter() - started


async def main():
    version = subprocess.run(
        [dsh_mcp.binary(), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version == f"dsh-mcp {VERSION}", version
    await both_tools()
    print("wheel: both tools through dsh_mcp.binary() and stdio_args(): passed")
    binaries = {"wheel": dsh_mcp.binary()}
    if BASELINE:
        binaries["baseline"] = BASELINE
    times = {name: [] for name in binaries}
    for _ in range(5):
        for name, binary in binaries.items():
            times[name].append(await first_call(binary))
    for name, binary in binaries.items():
        print(
            f"first call from Python ({name}: {binary}): median {statistics.median(times[name]) * 1000:.1f} ms"
            f" of {len(times[name])} (min {min(times[name]) * 1000:.1f} ms)"
        )


asyncio.run(main())
