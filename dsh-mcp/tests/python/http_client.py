"""The Python MCP SDK's Streamable HTTP client against `dsh-mcp --listen`.

Run by tests/http.rs (`python_sdk_client`) with the server's URL (started
with `--sse-keepalive-secs 1`), token and workspace, then a second server's
HTTPS URL (started with `--max-sessions 1 --session-idle-secs 2`), the test CA
that signed its certificate, and a third server's URL (`--sse-keepalive-secs
0`), as arguments; exits non-zero, with the reason, on the first failed check.
Only the SDK's public API is used: the token goes in the headers of the
`httpx2.AsyncClient` handed to `streamable_http_client`.
"""

import asyncio
import logging
import ssl
import sys
import time

import httpx2
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

URL, TOKEN, WORKSPACE, TLS_URL, CA, NO_KEEPALIVE_URL = sys.argv[1:7]
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
    print("python sdk client: all checks passed")


asyncio.run(main())
