"""The serve command's heap freezing: once the links are Ready, their objects are out of the
collector's passes (frozen), so a gateway with thousands of links does not scan them again
and again (bench/scale_bench.py)."""

from __future__ import annotations

import gc

from collie_gateway.core.mirror import LinkState
from collie_gateway.serving import freeze_heap
from collie_gateway.sources import Source
from tests.collie_gateway.conftest import Rig, eventually


async def test_links_are_frozen_once_ready(rig: Rig) -> None:
    sources = []
    for name in ("desk", "pi"):
        rig.agent(name, runtime=name)
        sources.append(Source(name=name, socket=await rig.serve(name)))
    client, gw = await rig.gateway(sources)
    try:
        await freeze_heap(client.app)
        await eventually(lambda: all(m.state is LinkState.READY for m in gw.mirrors.values()))
        links = list(gw.agents.links.values())

        def frozen() -> bool:
            # gc.get_objects() lists the tracked objects of the three generations, not the
            # frozen ones
            tracked = {id(o) for o in gc.get_objects()}
            return all(id(link) not in tracked and gc.is_tracked(link) for link in links)

        await eventually(frozen)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        await client.close()
