#!/usr/bin/env python3
"""The baseline of the `mcp` bench's view figure: a plain MCP stdio server in
Python that answers `str_replace_editor` `view` of a file as an editor tool
does (read the file, number its lines), and nothing else. A stdin line loop
and `json`, no SDK: the least a server in Python does for the same answer.
"""
import json
import sys


def view(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    body = "\n".join(f"{i:6}\t{line}" for i, line in enumerate(lines, 1))
    return (
        f"Here's the content of {path} with line numbers "
        f"(which has a total of {len(lines)} lines):\n{body}\n"
    )


def answer(message):
    method = message.get("method")
    if method == "initialize":
        return {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "py-view", "version": "0"},
        }
    if method == "ping":
        return {}
    if method == "tools/call":
        args = message["params"]["arguments"]
        try:
            text, error = view(args["path"]), False
        except OSError as e:
            text, error = f"Error: {e.strerror}: {args['path']}", True
        return {"content": [{"type": "text", "text": text}], "isError": error}
    return None


def main():
    out = sys.stdout
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        result = answer(message)
        reply = {"jsonrpc": "2.0", "id": message["id"]}
        if result is None:
            reply["error"] = {"code": -32601, "message": "method not found"}
        else:
            reply["result"] = result
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
