"""mini-swe-agent's own agent loop on dsh-mcp's persistent shell, over MCP.

`DshEnvironment` is a mini-swe-agent environment (its `execute(action)`
protocol) whose commands run in one `dsh-mcp` session started from the wheel
(`pip install dsh-mcp mini-swe-agent`): unlike mini-swe-agent's
`LocalEnvironment`, which starts a new `bash` per command, the directory,
variables and background jobs of one step are there at the next.

Run as a script, it drives `DefaultAgent` with mini-swe-agent's deterministic
test model through a scripted task in a new directory (a module written, its
test run, the shell's state read back at submission) and checks the outcome:

    python mini_swe_agent.py [WORKSPACE]
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
import threading
from typing import Any

import dsh_mcp
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from minisweagent.agents.default import DefaultAgent
from minisweagent.exceptions import Submitted
from minisweagent.models.test_models import DeterministicModel, make_output

# The line the bash tool ends a failed command's output with.
_EXIT_CODE = re.compile(r"\n?\[exit code: (-?\d+)\]$")


class DshEnvironment:
    """A mini-swe-agent environment over one dsh-mcp stdio session."""

    def __init__(self, workspace: str, *flags: str, timeout: float = 300.0):
        self.workspace = workspace
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        params = StdioServerParameters(
            command=dsh_mcp.binary(), args=dsh_mcp.stdio_args(workspace, *flags)
        )
        self._session = self._call(self._open(params))

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(self.timeout + 30)

    async def _open(self, params):
        opened = asyncio.get_running_loop().create_future()
        self._closed = asyncio.Event()

        async def hold():
            try:
                async with stdio_client(params) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        opened.set_result(session)
                        await self._closed.wait()
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                if not opened.done():
                    opened.set_exception(err)

        self._holder = asyncio.ensure_future(hold())
        return await opened

    async def _bash(self, command: str) -> tuple[str, int]:
        result = await self._session.call_tool("bash", {"command": command})
        text = "".join(c.text for c in result.content if c.type == "text")
        if result.is_error:
            return text, -1
        match = _EXIT_CODE.search(text)
        if match:
            return text[: match.start()], int(match.group(1))
        return text, 0

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        output, returncode = self._call(self._bash(command))
        result = {"output": output + ("\n" if output else ""), "returncode": returncode, "exception_info": ""}
        lines = result["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" and returncode == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {"role": "exit", "content": submission,
                 "extra": {"exit_status": "Submitted", "submission": submission}}
            )
        return result

    def get_template_vars(self, **kwargs) -> dict[str, Any]:
        return {"cwd": self.workspace, **kwargs}

    def serialize(self) -> dict:
        return {"info": {"config": {"environment": {"workspace": self.workspace},
                                    "environment_type": "DshEnvironment"}}}

    def close(self) -> None:
        async def finish():
            self._closed.set()
            await self._holder

        self._call(finish())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


SCRIPT = [
    "mkdir -p calc && cd calc && printf 'def add(a, b):\\n    return a + b\\n' > calc.py && export STEP=written",
    "printf 'import unittest\\nfrom calc import add\\n\\nclass T(unittest.TestCase):\\n"
    "    def test_add(self):\\n        self.assertEqual(add(2, 3), 5)\\n' > test_calc.py",
    "python3 -m unittest -q test_calc 2>&1 | tail -1",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo \"$STEP $(basename \"$PWD\")\" && ls -1 *.py",
]


def main() -> None:
    workspace = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
    model = DeterministicModel(
        outputs=[make_output(f"step {i}", [{"command": c}]) for i, c in enumerate(SCRIPT)]
    )
    env = DshEnvironment(workspace)
    try:
        agent = DefaultAgent(
            model, env, system_template="You are a test.", instance_template="{{task}}",
            step_limit=10, cost_limit=0
        )
        result = agent.run("write calc.py, test it, submit")
    finally:
        env.close()
    assert result.get("exit_status") == "Submitted", result
    # The directory and the variable of the first step were there at the last.
    assert result["submission"] == "written calc\ncalc.py\ntest_calc.py\n", result["submission"]
    observations = [m["content"] for m in agent.messages if m.get("role") == "user"]
    assert any("<returncode>0</returncode>" in o and "OK" in o for o in observations), observations
    print("mini-swe-agent on dsh-mcp: the scripted task passed (state kept across steps)")


if __name__ == "__main__":
    main()
