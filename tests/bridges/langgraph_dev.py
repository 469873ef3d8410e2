"""``langgraph dev`` (langgraph-cli[inmem], the in-memory Agent Server) for the LangGraph
server-mode tests, installed with pip into a virtual environment of the tests' own
(``.cache/``) on first use: ``langgraph-api`` pins ``jsonschema-rs<0.45``, which the project's
own environment cannot share. The standard library only: ``python3 -m
tests.bridges.langgraph_dev`` installs it ahead (CI does, while it installs the rest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.bridges.npm_clients import installed

API = "0.16.7"  # langgraph-api: the server itself
PACKAGES = (
    "langgraph-cli[inmem]==0.4.40",
    f"langgraph-api=={API}",
    "langchain==1.5.2",  # the fixture graphs' HumanInTheLoopMiddleware and fake chat model
)


def install(fresh: Path) -> None:
    """A virtual environment in ``fresh`` with ``PACKAGES`` (about 20 s)."""
    subprocess.run([sys.executable, "-m", "venv", str(fresh)], check=True, timeout=120)
    pip = [str(fresh / "bin" / "python"), "-m", "pip", "install", "--quiet", *PACKAGES]
    subprocess.run(pip, check=True, timeout=600, capture_output=True)


def langgraph_dev() -> list[str]:
    """The command that runs ``langgraph`` (add ``dev …``), installed when missing. The
    environment is renamed into place after its install, so its scripts' ``#!`` lines name
    the folder it was made in: the module is run by the environment's own ``python``."""
    where = installed(f"langgraph-dev-{API}", "bin/langgraph", install)
    return [str(where / "bin" / "python"), "-m", "langgraph_cli"]


if __name__ == "__main__":
    print(" ".join(langgraph_dev()))
