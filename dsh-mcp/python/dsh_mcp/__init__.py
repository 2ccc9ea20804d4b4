"""The `dsh-mcp` server from its wheel: where pip put the binary, and the
arguments that start it as a stdio MCP server.

    from mcp import StdioServerParameters
    import dsh_mcp

    params = StdioServerParameters(
        command=dsh_mcp.binary(), args=dsh_mcp.stdio_args("/testbed")
    )
"""

from __future__ import annotations

import os
import sys
import sysconfig

__all__ = ["binary", "stdio_args"]

_NAME = "dsh-mcp"


def binary() -> str:
    """The absolute path of the `dsh-mcp` binary this package installed.

    Looked for where pip puts scripts for this interpreter's install scheme
    (a venv, the system, `--user`, `--target`/`--prefix` beside the package);
    raises FileNotFoundError naming the places tried.
    """
    tried = []
    schemes = [None]
    if sys.platform != "win32":
        schemes.append("posix_user")
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        tried.append(scripts)
    # `pip install --target DIR` / `--prefix`: DIR/bin beside the package.
    here = os.path.dirname(os.path.abspath(__file__))
    tried.append(os.path.join(os.path.dirname(here), "bin"))
    tried.append(os.path.normpath(os.path.join(here, "..", "..", "..", "..", "bin")))
    for directory in tried:
        path = os.path.join(directory, _NAME)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"the {_NAME} binary of this package is not in any of: {', '.join(tried)}")


def stdio_args(workspace: str | None = None, *extra: str) -> list[str]:
    """The arguments of a stdio server (the binary's default mode) on
    `workspace` (the shell's start directory and the editor's root), then
    any flag of `dsh-mcp --help` in `extra` (`"--sandbox", "workspace-write"`)."""
    args = []
    if workspace is not None:
        args += ["--workspace", os.fspath(workspace)]
    args += list(extra)
    return args
