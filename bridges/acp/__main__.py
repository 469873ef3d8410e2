"""``python -m bridges.acp --socket PATH --state PATH [--cwd DIR] -- COMMAND ARGS…``."""

import sys

from bridges.acp.cli import main

sys.exit(main())
