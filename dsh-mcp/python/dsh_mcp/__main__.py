"""`python -m dsh_mcp ARGS`: runs the binary with ARGS."""

import os
import sys

from dsh_mcp import binary

if __name__ == "__main__":
    path = binary()
    os.execv(path, [path, *sys.argv[1:]])
