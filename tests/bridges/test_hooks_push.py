"""The hooks bridge's waiting and finished pushes (wire ``Item.push``) through a real gateway
to the fake APNs and FCM; its notices in the phone's language (``Item.words``); phone
messages queued across a bridge restart; Codex's rollout read as the session's items."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridges.hooks import mapping
from collie_gateway.strings import Catalogue
from tests.bridges.hooks_rig import AGENT, FIXTURES, Hooks, running, start_bridge
from tests.collie_gateway.conftest import ClientFactory, eventually, get_json
from tests.collie_gateway.push_fixtures import Services, services
from tests.collie_gateway.test_push_http import APNS_TOKEN, FCM_TOKEN, SECRET, alert, register


@pytest.fixture
async def svc(tmp_path: Path) -> AsyncIterator[Services]:
    async with services(tmp_path, time.time) as found:
        yield found


@pytest.fixture
async def hooks(aiohttp_client: ClientFactory, svc: Services) -> AsyncIterator[Hooks]:
    async with running(aiohttp_client, lambda rig: {"push_targets": svc.targets}) as found:
        yield found


def write_transcript(hooks: Hooks, session: str = "s1", secret: str = "") -> None:
    """The session's transcript: the fixture's lines, its last reply carrying ``secret``."""
    lines = (FIXTURES / "transcript.jsonl").read_text().splitlines()
    last = {
        "type": "assistant",
        "uuid": "u-last",
        "message": {"role": "assistant", "content": f"All tests pass {secret}\nSecond line"},
    }
    (hooks.rig.tmp / f"{session}.jsonl").write_text("\n".join([*lines, json.dumps(last)]) + "\n")


async def test_P1_stop_pushes_finished_with_the_last_replys_first_line_masked(
    hooks: Hooks, svc: Services
) -> None:
    await register(hooks.client, "apns", APNS_TOKEN)
    await register(hooks.client, "fcm", FCM_TOKEN, lang="it")
    write_transcript(hooks, secret=SECRET)
    assert await hooks.post(hooks.body("Stop")) == (200, {})
    await eventually(lambda: len(svc.apns.requests) == 1 and len(svc.fcm.requests) == 1)
    shown = alert(svc.apns.requests[0])
    assert shown["title"] == "Claude Code finished in shop"
    assert shown["body"].startswith("All tests pass ")
    assert "Second line" not in shown["body"]
    fcm: Any = svc.fcm.requests[0].message["notification"]
    assert fcm["title"] == "Claude Code ha finito in shop"
    for body in [svc.apns.requests[0].body, json.dumps(svc.fcm.requests[0].message).encode()]:
        assert SECRET.encode() not in body
    conv = hooks.conv_id()
    assert mapping.FINISHED.format(client="Claude Code", folder="shop") in await hooks.texts(
        conv, "notice"
    )


async def test_an_idle_notification_pushes_waiting_and_a_permission_prompt_with_its_card_not(
    hooks: Hooks, svc: Services
) -> None:
    await register(hooks.client, "apns", APNS_TOKEN)
    write_transcript(hooks)
    assert await hooks.post(hooks.body("Notification")) == (200, {})
    await eventually(lambda: len(svc.apns.requests) == 1)
    assert alert(svc.apns.requests[0])["title"] == "Claude Code is waiting in shop"
    assert alert(svc.apns.requests[0])["body"] == "All tests pass"
    hooks.hold(hooks.body("PermissionRequest"))
    await hooks.wait_asks(1)
    await eventually(lambda: len(svc.apns.requests) == 2)  # the card's own push
    body = {**hooks.body("Notification"), "notification_type": "permission_prompt"}
    assert await hooks.post(body) == (200, {})
    await asyncio.sleep(0.3)
    assert len(svc.apns.requests) == 2


async def test_the_bridges_notices_read_in_the_phones_language(hooks: Hooks) -> None:
    assert await hooks.post(hooks.body("UserPromptSubmit")) == (200, {})
    conv = hooks.conv_id()
    await hooks.say(conv, "Also update the changelog")
    await hooks.wait_text(conv, "notice", mapping.QUEUED.format(client="Claude Code"))
    path = f"/api/v1/agents/{AGENT}/conversations/{conv}"

    async def notices(lang: str) -> list[str]:
        view = await get_json(hooks.client, f"{path}?lang={lang}")
        return [line["text"] for line in view["lines"] if line["kind"] == "notice"]

    for lang in ("en", "it", "pt-BR"):
        said = Catalogue(lang=lang).fmt("say_hooks_queued", client="Claude Code")
        await eventually(lambda lang=lang, said=said: _has(notices(lang), said))


async def _has(found: Any, text: str) -> bool:
    return text in await found


def test_every_notice_the_bridge_says_is_in_every_catalogue_the_english_the_same() -> None:
    en = Catalogue()
    for template, key in mapping.SAY_KEYS.items():
        assert en[key] == template
        for lang in ("it", "pt-BR"):
            worded = Catalogue(lang=lang)[key]
            assert worded != template
            assert worded.count("{") == template.count("{")


async def test_a_phone_message_queued_is_given_once_after_a_bridge_restart(hooks: Hooks) -> None:
    assert await hooks.post(hooks.body("UserPromptSubmit")) == (200, {})
    conv = hooks.conv_id()
    await hooks.say(conv, "Also update the changelog")
    await hooks.wait_text(conv, "notice", mapping.QUEUED.format(client="Claude Code"))
    await hooks.rig.stop(AGENT)
    await hooks.bridge.close()
    hooks.bridge = await start_bridge(hooks.rig)
    expected = {"decision": "block", "reason": "Also update the changelog"}
    assert await hooks.post(hooks.body("Stop")) == (200, expected)
    assert await hooks.post(hooks.body("Stop")) == (200, {})  # once
    await hooks.bridge.close()
    hooks.bridge = await start_bridge(hooks.rig)
    assert await hooks.post(hooks.body("Stop")) == (200, {})  # once, also after a restart


async def test_codex_rollout_is_the_sessions_items(hooks: Hooks) -> None:
    rollout = hooks.rig.tmp / "s1.jsonl"
    shutil.copy(FIXTURES / "codex-rollout.jsonl", rollout)
    stop = hooks.body("Stop", client="codex")
    assert await hooks.post(stop, client="codex") == (200, {})
    conv = hooks.conv_id()
    items = await hooks.items(conv)
    said = [(i["kind"], i["text"]) for i in items if i["kind"] in ("user", "reply")]
    assert said == [("user", "add two numbers"), ("reply", "Done.")]
    [tool] = [i for i in items if i["kind"] == "tool"]
    assert (tool["name"], tool["status"]) == ("exec_command", "done")
    assert "print(40+2)" in tool["text"]
    assert tool["output"].endswith("Output:\n42\n")
    finished = [i for i in items if i["kind"] == "notice"]
    assert finished[-1]["push"] == {"line": "Done."}
