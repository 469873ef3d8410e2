"""``python -m bridges.mcp``: the MCP bridge (see ``bridges.mcp.cli``)."""

import sys

from bridges.mcp.cli import main

sys.exit(main())
