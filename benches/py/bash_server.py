#!/usr/bin/env python3
"""The baseline of the `mcp` bench's `bash` figure: a plain MCP stdio server
in Python with one persistent bash on a pseudo-terminal, as simple agent
tools drive it: the command typed as a line followed by a marker line
(`printf` of a per-call marker and `$?`), the output read until the marker
came back. No protocol guarantees (a command that redefines `printf` or
`exit`s breaks it): the least a server in Python does for the same answer.
"""
import json
import os
import pty
import select
import sys
import termios


def start_bash():
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(PS1="", PS2="", TERM="dumb")
        os.execvp("bash", ["bash", "--norc", "--noprofile", "--noediting"])
    modes = termios.tcgetattr(fd)
    modes[3] &= ~termios.ECHO
    modes[1] &= ~termios.OPOST
    termios.tcsetattr(fd, termios.TCSANOW, modes)
    return fd


def run(fd, command, k):
    marker = f"__M_{k}_".encode()
    os.write(fd, f"{command}\nprintf '__M_%s_%s__\\n' {k} $?\n".encode())
    out = b""
    while True:
        select.select([fd], [], [])
        out += os.read(fd, 65536)
        at = out.find(marker)
        if at >= 0 and out.endswith(b"__\n"):
            status = int(out[at + len(marker):-3])
            return out[:at].decode("utf-8", "replace"), status


def main():
    fd = start_bash()
    calls = 0
    for line in sys.stdin:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            continue
        if method == "tools/call":
            calls += 1
            text, status = run(fd, msg["params"]["arguments"]["command"], calls)
            if status:
                text += f"\n[exit code: {status}]"
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n")
        sys.stdout.flush()


main()
