"""``--lang`` and per-language ``--strings`` through the CLI run as a process (issue 26)."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from collie_gateway.__main__ import phone_languages
from tests.collie_gateway.processes import GatewayProcess
from tests.collie_gateway.test_cli_errors import _one_line_refusal, _run, _sources


def test_phone_languages_default_and_overrides(tmp_path: Path) -> None:
    assert phone_languages(None, "en").default["send"] == "Send"
    assert phone_languages(None, "it-IT").default.lang == "it"
    assert phone_languages(None, "pt").default.lang == "pt-BR"
    strings = tmp_path / "s.json"
    strings.write_text(json.dumps({"fr": {"send": "Envoyer"}}), encoding="utf-8")
    french = phone_languages(strings, "fr")
    assert (french.default.lang, french.default["send"]) == ("fr", "Envoyer")
    assert french.default["t_decided"] == "Decided in the durable agent."  # English fallback
    strings.write_text(json.dumps({"send": "Manda"}), encoding="utf-8")
    assert phone_languages(strings, "it").default["send"] == "Manda"  # flat: the default's
    assert phone_languages(strings, "it").get("en")["send"] == "Send"
    with pytest.raises(ValueError, match=r"^--lang fr: no catalogue in that language"):
        phone_languages(None, "fr")


def test_cli_unknown_lang_is_one_line_exit_2(tmp_path: Path) -> None:
    done = _run("serve", "--sources", str(_sources(tmp_path)), "--port", "0", "--lang", "xx")
    assert _one_line_refusal(done) == (
        "collie-gateway: --lang xx: no catalogue in that language (known: en, it, pt-BR)"
    )
    assert not (tmp_path / "collie.db").exists()


async def test_cli_lang_it_answers_a_request_naming_none_in_italian(tmp_path: Path) -> None:
    sources = _sources(tmp_path, [{"name": "gone", "socket": str(tmp_path / "x.sock")}])
    strings = tmp_path / "s.json"
    strings.write_text(json.dumps({"it": {"state_unreachable": "Irraggiungibile"}}), "utf-8")
    gw = GatewayProcess(
        sources,
        tmp_path / "g.db",
        tmp_path / "g.log",
        args=["--lang", "it", "--strings", str(strings)],
    )
    await gw.start(ready=0)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(gw.base + "/api/v1/dashboard") as resp:
                italian = await resp.json()
                assert resp.headers["Content-Language"] == "it"
            headers = {"Accept-Language": "en-US,en;q=0.9"}
            async with http.get(gw.base + "/api/v1/dashboard", headers=headers) as resp:
                english = await resp.json()
    finally:
        await gw.stop()
    assert italian["sections"][-1]["title"] == "Agenti durevoli"
    assert english["sections"][-1]["title"] == "Durable agents"
    assert italian["sections"][-1]["rows"][0]["right"]["label"] in (
        "Avvio in corso",
        "Irraggiungibile",
    )
