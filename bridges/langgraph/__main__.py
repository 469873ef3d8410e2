"""``python -m bridges.langgraph``: the LangGraph bridge (see ``bridges.langgraph.cli``)."""

import sys

from bridges.langgraph.cli import main

sys.exit(main())
