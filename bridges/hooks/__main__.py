"""``python -m bridges.hooks``: the hooks bridge (see ``bridges.hooks.cli``)."""

import sys

from bridges.hooks.cli import main

sys.exit(main())
