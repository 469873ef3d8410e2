"""The ``agent-client-protocol`` package's own example agents behind the bridge, through the
phone API. The examples ship in the package's source distribution (not in the wheel), so they
are fetched once with pip (the registry's ordinary client) into a cache folder and run from
there; nothing of them is kept in this repository."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.bridges.conftest import Acp, acp_rig, agent_env
from tests.collie_gateway.conftest import Rig

VERSION = "0.12.1"


@pytest.fixture(scope="session")
def examples() -> Path:
    """The folder holding the package's ``examples/`` (downloaded once per machine)."""
    cache = Path(tempfile.gettempdir()) / f"collie-acp-examples-{VERSION}"
    if not (cache / "echo_agent.py").exists():
        work = Path(tempfile.mkdtemp(prefix="acp-sdist-"))
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "-q", "--no-deps"),
                *("--no-binary", ":all:", "-d", str(work), f"agent-client-protocol=={VERSION}"),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        [sdist] = work.glob("*.tar.gz")
        staging = Path(tempfile.mkdtemp(prefix="acp-examples-"))
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                if "/examples/" in member.name and member.name.endswith(".py"):
                    member.name = Path(member.name).name
                    tar.extract(member, staging, filter="data")
        with contextlib.suppress(OSError):  # another run got there first
            staging.rename(cache)
    return cache


async def _phone(rig: Rig, script: Path) -> Acp:
    return await acp_rig(rig, command=[sys.executable, str(script)], env=agent_env(rig.tmp))


async def test_the_packages_echo_agent_behind_the_bridge(rig: Rig, examples: Path) -> None:
    acp = await _phone(rig, examples / "echo_agent.py")
    try:
        hello = acp.gw.mirrors["claude"].hello
        assert hello is not None
        assert hello.runtime == "acp"  # it sends no agentInfo
        conv = await acp.start()
        await acp.say(conv, "Hello from the phone")
        await acp.wait_text(conv, "reply", "Hello from the phone")
        assert [i["kind"] for i in await acp.items(conv)] == ["user", "reply"]
    finally:
        await acp.bridge.close()


async def test_the_packages_example_agent_behind_the_bridge(rig: Rig, examples: Path) -> None:
    acp = await _phone(rig, examples / "agent.py")
    try:
        hello = acp.gw.mirrors["claude"].hello
        assert hello is not None
        assert hello.runtime == "example-agent"
        assert "reopen" not in hello.features  # loadSession is not declared
        conv = await acp.start()
        await acp.say(conv, "ping")
        await acp.wait_text(conv, "reply", "Client sent:ping")
        chat = await acp.chat(conv)
        assert chat["header"]["title"] is not None
        assert os.path.basename(str(acp.tmp)) in str(chat)
    finally:
        await acp.bridge.close()
