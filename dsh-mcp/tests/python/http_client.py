"""The Python MCP SDK's Streamable HTTP client against `dsh-mcp --listen`.

Run by tests/http.rs (`python_sdk_client`) with the server's URL (started
with `--sse-keepalive-secs 1`), token and workspace, then a second server's
HTTPS URL (started with `--max-sessions 1 --session-idle-secs 2`), the test CA
that signed its certificate, a third server's URL (`--sse-keepalive-secs 0`),
and a fourth server's URL (`--copy-on-write`) with its workspace, as
arguments; exits non-zero, with the reason, on the first failed check.
Only the SDK's public API is used: the token goes in the headers of the
`httpx2.AsyncClient` handed to `streamable_http_client`.
"""

import asyncio
import json
import logging
import ssl
import sys
import time

import httpx2
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

URL, TOKEN, WORKSPACE, TLS_URL, CA, NO_KEEPALIVE_URL, COW_URL, COW_WORKSPACE = sys.argv[1:9]
HEADERS = {
    "MCP-Protocol-Version": "2025-06-18",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


SESSIONS = []


async def remember_session(response):
    sid = response.headers.get("mcp-session-id")
    if sid and sid not in SESSIONS:
        SESSIONS.append(sid)


class Records(logging.Handler):
    """What the SDK's transport logs (a failed DELETE, a reconnection)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


LOGGED = Records()
logging.getLogger("mcp.client.streamable_http").addHandler(LOGGED)
logging.getLogger("mcp.client.streamable_http").setLevel(logging.DEBUG)


def client(token=TOKEN, url=URL, read=300.0):
    """The SDK's transport with the token, as the docs show it: an
    httpx2 client of the caller's own (the SDK's defaults: 30 s, and
    `read` for a response stream)."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30.0, read=read),
        event_hooks={"response": [remember_session]},
    )
    return streamable_http_client(url, http_client=http)


def tls_http():
    """An HTTP client trusting the test CA only."""
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"},
        verify=ssl.create_default_context(cafile=CA),
        timeout=httpx2.Timeout(60),
        event_hooks={"response": [remember_session]},
    )


async def over_tls():
    """The second server, over HTTPS: the SDK's client through the test CA;
    its one session refuses another (503), then expires when idle (404)."""
    async with streamable_http_client(TLS_URL, http_client=tls_http()) as (read, write):
        async with ClientSession(read, write) as a:
            await a.initialize()
            sid = SESSIONS[-1]
            assert await bash(a, "echo over tls") == "over tls"
            async with tls_http() as http:
                refused = await http.post(TLS_URL, headers=HEADERS, json=INITIALIZE)
                assert refused.status_code == 503, refused.status_code
                assert "limit of 1 session" in refused.text, refused.text
                # Through the SDK: an error of its own, with the sentence.
                try:
                    async with streamable_http_client(TLS_URL, http_client=tls_http()) as (r, w):
                        async with ClientSession(r, w) as full:
                            await asyncio.wait_for(full.initialize(), 30)
                    raise AssertionError("a session past the limit was opened")
                except (MCPError, BaseExceptionGroup) as raised:
                    err = mcp_error(raised)
                    assert err.code == -32011, (err.code, err.message)
                    assert "limit of 1 session" in err.message, err.message
                # Idle for its 2 s, the session ends and frees its place:
                # the event is a new session admitted (a request of the old
                # one would be use, not idleness), looked for until a
                # generous bound; then the old id gets 404.
                deadline = time.monotonic() + 60
                while True:
                    again = await http.post(TLS_URL, headers=HEADERS, json=INITIALIZE)
                    if again.status_code == 200:
                        break
                    assert again.status_code == 503, again.status_code
                    assert time.monotonic() < deadline, "the idle session never expired"
                    await asyncio.sleep(0.5)
                ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
                gone = await http.post(
                    TLS_URL, headers={**HEADERS, "Mcp-Session-Id": sid}, json=ping
                )
                assert gone.status_code == 404, gone.status_code
    # A client that does not trust the test CA does not get in.
    async with httpx2.AsyncClient() as untrusting:
        try:
            await untrusting.get(TLS_URL.replace("/mcp", "/healthz"))
            raise AssertionError("a client without the test CA connected")
        except httpx2.HTTPError:
            pass


def mcp_error(err):
    """The SDK's MCPError in `err` (anyio's task groups hand it on wrapped
    in an exception group when it leaves the transport's context)."""
    while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
        err = err.exceptions[0]
    assert isinstance(err, MCPError), repr(err)
    return err


def text(result):
    return "".join(c.text for c in result.content if c.type == "text")


async def bash(session, command, **kw):
    result = await session.call_tool("bash", {"command": command}, **kw)
    assert not result.is_error, text(result)
    return text(result)


async def raw_bash(http, sid, command):
    """A `bash` call in session `sid` by plain JSON-RPC (a fork has no
    client of its own: it needs no `initialize`)."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": command}},
    }
    answer = await http.post(
        COW_URL, headers={**AUTH, **HEADERS, "Mcp-Session-Id": sid}, json=call
    )
    assert answer.status_code == 200, (answer.status_code, answer.text)
    if answer.headers["content-type"].startswith("text/event-stream"):
        lines = [l[5:] for l in answer.text.splitlines() if l.startswith("data:")]
        message = json.loads(lines[-1])
    else:
        message = answer.json()
    assert not message["result"]["isError"], message
    return "".join(c["text"] for c in message["result"]["content"] if c["type"] == "text")


async def rollout():
    """The fourth server, `--copy-on-write`: the harness endpoints used on
    the session an SDK client holds open, in between its calls. The
    client's session goes on through a snapshot, a fork, a restore and a
    reset without a new `initialize`; its calls see each operation."""
    harness = COW_URL.removesuffix("/mcp")
    async with client(url=COW_URL) as (read, write):
        async with ClientSession(read, write) as a:
            await a.initialize()
            sid = SESSIONS[-1]
            assert await bash(a, "echo one > f.txt && mkdir sub && cd sub && export V=kept") == ""
            async with httpx2.AsyncClient(headers=AUTH, timeout=60) as http:
                changes = await http.get(f"{harness}/sessions/{sid}/changes")
                assert changes.status_code == 200, changes.text
                assert changes.json() == {
                    "changes": [
                        {"path": f"{COW_WORKSPACE}/f.txt", "kind": "added", "type": "file"},
                        {"path": f"{COW_WORKSPACE}/sub", "kind": "added", "type": "dir"},
                    ]
                }, changes.text
                snap = await http.post(f"{harness}/sessions/{sid}/snapshot")
                assert snap.status_code == 200, snap.text
                snapshot = snap.json()["snapshot"]

                assert await bash(a, "echo two > ../f.txt && export V=changed") == ""
                forked = await http.post(f"{harness}/sessions/{sid}/fork")
                assert forked.status_code == 200, forked.text
                fork = forked.json()["session"]
                got = await raw_bash(http, fork, "pwd; echo $V; cat ../f.txt")
                assert got == f"{COW_WORKSPACE}/sub\nchanged\ntwo", got

                restored = await http.post(
                    f"{harness}/sessions/{sid}/restore", json={"snapshot": snapshot}
                )
                assert restored.status_code == 200, restored.text
                got = await bash(a, "pwd; echo $V; cat ../f.txt")
                assert got == f"{COW_WORKSPACE}/sub\nkept\none", got
                # The fork keeps its own copy.
                assert await raw_bash(http, fork, "cat ../f.txt") == "two"

                reset = await http.post(f"{harness}/sessions/{sid}/reset")
                assert reset.status_code == 200, reset.text
                got = await bash(a, "pwd; echo ${V:-unset}; ls")
                assert got == f"{COW_WORKSPACE}\nunset\nbase.txt", got

                deleted = await http.delete(f"{harness}/snapshots/{snapshot}")
                assert deleted.status_code == 200, deleted.text
                again = await http.delete(f"{harness}/snapshots/{snapshot}")
                assert again.status_code == 404, again.text
                ended = await http.delete(
                    COW_URL, headers={**HEADERS, "Mcp-Session-Id": fork}
                )
                assert ended.status_code == 204, ended.status_code
                gone = await http.get(f"{harness}/sessions/{fork}/changes")
                assert gone.status_code == 404, gone.text
    # The client's DELETE on leaving ended the session's endpoints too.
    async with httpx2.AsyncClient(headers=AUTH) as http:
        gone = await http.get(f"{harness}/sessions/{sid}/changes")
        assert gone.status_code == 404, gone.text


async def main():
    async with client() as (read, write):
        async with ClientSession(read, write) as a:
            info = await a.initialize()
            assert info.server_info.name == "dsh-mcp", info
            sid = SESSIONS[-1]
            names = sorted(t.name for t in (await a.list_tools()).tools)
            assert names == ["bash", "str_replace_editor"], names

            # State per session: a second session has its own shell.
            assert await bash(a, "cd /tmp && export X=a") == ""
            async with client() as (r2, w2):
                async with ClientSession(r2, w2) as b:
                    await b.initialize()
                    got = await bash(b, "echo $PWD ${X-unset}")
                    assert got == f"{WORKSPACE} unset", got
            assert await bash(a, "echo $PWD $X") == "/tmp a"

            path = f"{WORKSPACE}/py.txt"
            made = await a.call_tool(
                "str_replace_editor",
                {"command": "create", "path": path, "file_text": "alpha\n"},
            )
            assert not made.is_error, text(made)
            assert await bash(a, f"cat {path}") == "alpha"

            # A call the client gives up on is cancelled: the next one runs
            # at once in a reset shell.
            try:
                await a.call_tool(
                    "bash",
                    {"command": "sleep 300"},
                    read_timeout_seconds=2,
                )
                raise AssertionError("a 300 s call returned within its 2 s timeout")
            except Exception as err:  # the SDK's McpError for the timeout
                if isinstance(err, AssertionError):
                    raise
            after = await asyncio.wait_for(bash(a, "echo ${X-reset}"), 60)
            assert after.endswith("reset"), after

    # Leaving the client sent DELETE, answered as the SDK takes success (no
    # "Session termination failed" logged); the id is refused after it, a
    # second DELETE too (404).
    assert not [l for l in LOGGED.lines if "termination failed" in l], LOGGED.lines
    async with httpx2.AsyncClient() as http:
        again = await http.delete(URL, headers={**AUTH, **HEADERS, "Mcp-Session-Id": sid})
        assert again.status_code == 404, again.status_code
        gone = await http.post(
            URL,
            headers={
                **AUTH,
                "Mcp-Session-Id": sid,
                "MCP-Protocol-Version": "2025-06-18",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
            json={"jsonrpc": "2.0", "id": 9, "method": "ping"},
        )
        assert gone.status_code == 404, gone.status_code
        bare = await http.post(URL, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert bare.status_code == 401, bare.status_code
        # The probe: 200, nothing said, no token needed.
        health = await http.get(URL.replace("/mcp", "/healthz"))
        assert (health.status_code, health.text) == (200, ""), health
        # A page's Origin: 403. A body past the bound (4 MiB): 413.
        page = await http.post(
            URL, headers={**AUTH, **HEADERS, "Origin": "https://evil.example"}, json=INITIALIZE
        )
        assert page.status_code == 403, page.status_code
        big = await http.post(
            URL, headers={**AUTH, **HEADERS}, content=b"{" + b" " * (5 << 20) + b"}"
        )
        assert big.status_code == 413, big.status_code

    # A wrong token cannot open a session: the SDK's user gets an error of
    # its own (not the one of a full server), with the server's sentence.
    try:
        async with client("wrong-token-0123456789") as (r, w):
            async with ClientSession(r, w) as s:
                await asyncio.wait_for(s.initialize(), 30)
        raise AssertionError("a wrong token opened a session")
    except (MCPError, BaseExceptionGroup) as raised:
        err = mcp_error(raised)
        assert err.code == -32010, (err.code, err.message)
        assert "Unauthorized" in err.message and "Bearer" in err.message, err.message

    # A call longer than the client's read timeout (3 s here; the SDK's
    # default is 300 s, the server's default call timeout): the server's
    # keepalive comments (every 1 s here) keep its stream alive. Without
    # them (the third server) the client drops the call.
    async with client(read=3.0) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            assert await bash(s, "sleep 6; echo kept") == "kept"
    async with client(url=NO_KEEPALIVE_URL, read=3.0) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            try:
                await bash(s, "sleep 6; echo kept")
                raise AssertionError("a silent 6 s stream outlived a 3 s read timeout")
            except MCPError as err:
                assert err.code == -32000, (err.code, err.message)
    # No call's stream was resumed (the server sends no event ids); a GET
    # stream the server ended with its session is the SDK's to reopen.
    assert not [l for l in LOGGED.lines if "SSE stream disconnected" in l], LOGGED.lines
    assert not [l for l in LOGGED.lines if "termination failed" in l], LOGGED.lines
    # (The session of the second server expires while its client is open:
    # its DELETE then gets 404, which the SDK logs.)
    await over_tls()
    await rollout()
    print("python sdk client: all checks passed")


asyncio.run(main())
