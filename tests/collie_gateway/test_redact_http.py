"""Issue 9.10's second round of secret families and issue 27's (spec X1) on what the phone
reads, through the HTTP API against an SDK agent: list rows, headers, ask cards, chat lines,
tool output and the live stream; and the held-out ordinary strings shown as sent."""

from __future__ import annotations

import json
from typing import Any

from collie_gateway.core.cleaning import TITLE_LIMIT, clean
from fixtures.redaction.corpus import HELD_OUT, Secret, held_out, in_sample
from tests.collie_gateway.chat_phone import Client, PhoneChat, shown
from tests.collie_gateway.conftest import Rig, eventually, get_json
from tests.collie_gateway.test_chat_http import CHAT, chat, seen_by_gateway, start
from wire.messages import Option

AGENT = "/api/v1/agents/desk"
# The in-sample cases of the families this round added (issue 9.10, heldout-2.json).
FAMILIES = (
    "Linear",
    "Datadog",
    "Atlassian",
    "Shopify",
    "Mailgun",
    "Heroku",
    "Grafana",
    "New Relic",
    "Sentry",
    "Postman",
    "Doppler",
    "Telegram",
    "Databricks",
    "Notion",
    "Google OAuth",
    "Microsoft Entra",
    "age secret",
    "Docker Hub",
)
SECRETS = [c for c in in_sample()[0] if c["description"].startswith(FAMILIES)]
ORDINARY = [c["input"] for name in HELD_OUT for c in held_out(name)[1]]


def _leaks(case: Secret, text: str) -> bool:
    """Whether any 6 characters of the secret after its kind prefix show in ``text``."""
    body = case["secret"][len(case["kept"]) :]
    return any(body[i : i + 6] in text for i in range(len(body) - 5))


async def _rows_and_headers_leak_nothing(
    client: Client, cases: list[Secret], prefix: str
) -> dict[str, Any]:
    """Each case is conversation ``{prefix}{n}``: its list row and header show none of its
    secret. Returns the rows by conversation id."""
    rows = {
        r["conversation_id"]: r for r in (await get_json(client, AGENT + "/conversations"))["rows"]
    }
    for n, case in enumerate(cases):
        header = (await get_json(client, AGENT + f"/conversations/{prefix}{n}"))["header"]
        row = rows[f"{prefix}{n}"]
        for text in (row["title"], row["line"], header["title"], header["line2"]):
            assert not _leaks(case, text), (case["description"], text)
    return rows


def _case(word: str, cases: list[Secret] | None = None) -> Secret:
    return next(c for c in cases or SECRETS if c["description"].startswith(word))


async def test_X1_second_families_masked_on_rows_headers_and_cards(rig: Rig) -> None:
    assert len(SECRETS) >= 30
    client, gw, agent, conv = await start(rig)
    for n, case in enumerate(SECRETS):
        await agent.open_conversation(f"s{n}", title=case["input"], subtitle=case["input"])
    linear, postman = _case("Linear API key"), _case("Postman API key")
    await conv.ask(
        kind="choice",
        id="q",
        title=linear["input"],
        options=[Option(id="a", label=f"Use {postman['secret']}"), Option(id="b", label="Skip")],
    )
    await eventually(lambda: len(gw.mirrors["desk"].conversations) == 1 + len(SECRETS))
    await eventually(lambda: gw.agents.find_ask("desk", "q") is not None)
    rows = await _rows_and_headers_leak_nothing(client, SECRETS, "s")
    assert rows["s0"]["title"].startswith("client = LinearClient(")  # the context stays
    card = json.dumps((await chat(client))["cards"]["cards"][0], ensure_ascii=False)
    assert "lin_api_••••" in card
    assert "Use PMAK-••••" in card  # an option label
    assert not _leaks(linear, card)
    assert not _leaks(postman, card)


async def test_X1_second_families_masked_in_chat_lines_tool_output_and_live(rig: Rig) -> None:
    client, gw, _agent, conv = await start(rig)
    phone = PhoneChat(client, CHAT)
    await phone.start()
    shopify, telegram = _case("Shopify access token"), _case("Telegram bot token")
    flag = next(c for c in in_sample()[0] if "--password flag" in c["description"])
    await conv.append(kind="reply", text=shopify["input"])
    await conv.append(kind="tool", name="shell", status="done", call_id="t1", output=flag["input"])
    await conv.append(kind="markdown", text=f"Set `{telegram['input']}` in **bot.py**")
    await seen_by_gateway(gw, conv, "done")
    view = await chat(client)
    reply, tool, md = view["lines"]
    assert reply["text"] == shopify["expect"]  # "the store token is shpat_•••• if you need it"
    assert tool["output"] == flag["expect"]
    assert md["html"] == "<p>Set <code>bot = Bot('••••')</code> in <strong>bot.py</strong></p>\n"
    everything = json.dumps(view, ensure_ascii=False)
    for case in (shopify, telegram, flag):
        assert not _leaks(case, everything), case["description"]
    await eventually(lambda: phone.shown() == shown(view))  # the live path masks alike
    await phone.stop()


async def test_X1_held_out_ordinary_strings_shown_as_sent(rig: Rig) -> None:
    """0 false alarms: git SHAs, trace ids, lockfile hashes, documented example keys … on the
    phone's rows and headers exactly as the agent sent them (cleaned, not masked)."""
    client, gw, agent, _conv = await start(rig)
    for n, text in enumerate(ORDINARY):
        await agent.open_conversation(f"o{n}", title=text, subtitle=text)
    await eventually(lambda: len(gw.mirrors["desk"].conversations) == 1 + len(ORDINARY))
    rows = {
        r["conversation_id"]: r for r in (await get_json(client, AGENT + "/conversations"))["rows"]
    }
    for n, text in enumerate(ORDINARY):
        sent = clean(text, TITLE_LIMIT).text
        header = (await get_json(client, AGENT + f"/conversations/o{n}"))["header"]
        assert rows[f"o{n}"]["title"] == sent
        assert rows[f"o{n}"]["line"] == sent
        assert header["title"] == sent
        assert header["line2"] == sent


# Issue 27's families and shapes (in sample), through the phone's HTTP API.
ISSUE_27 = (
    *("Okta", "Cloudflare", "Supabase", "Fly.io", "Render", "Twilio", "Discord webhook"),
    *("mysql", "mariadb", "sshpass", "AWS secret key", "database URL with a", "Slack"),
)
NEW = [c for c in in_sample()[0] if c["description"].startswith(ISSUE_27)]


async def test_X1_issue_27_families_masked_on_rows_and_headers(rig: Rig) -> None:
    assert len(NEW) >= 35
    client, gw, agent, _conv = await start(rig)
    for n, case in enumerate(NEW):
        await agent.open_conversation(f"n{n}", title=case["input"], subtitle=case["input"])
    await eventually(lambda: len(gw.mirrors["desk"].conversations) == 1 + len(NEW))
    await _rows_and_headers_leak_nothing(client, NEW, "n")


async def test_X1_issue_27_only_the_secret_masked_in_chat_tool_output_and_live(rig: Rig) -> None:
    """The AWS key id beside its secret, a Twilio SID and a Slack webhook's ids show; the
    secrets never do, on the read or the live stream."""
    client, gw, _agent, conv = await start(rig)
    phone = PhoneChat(client, CHAT)
    await phone.start()
    aws = _case("AWS secret key on the line after its access key id", NEW)
    twilio = _case("Twilio auth token positional beside the SID (PHP)", NEW)
    sshpass = _case("sshpass -p with a bare password before scp", NEW)
    slack = _case("Slack workflow webhook", NEW)
    await conv.append(kind="reply", text=aws["input"])
    await conv.append(kind="reply", text=f"{twilio['input']} and {slack['input']}")
    await conv.append(
        kind="tool", name="shell", status="done", call_id="t1", output=sshpass["input"]
    )
    await seen_by_gateway(gw, conv, "done")
    view = await chat(client)
    first, second, tool = view["lines"]
    assert first["text"] == aws["expect"]  # "AWS_ACCESS_KEY_ID=AKIA…(whole)\n…KEY=••••"
    assert aws["input"].split("\n")[0] in first["text"]
    assert second["text"] == f"{twilio['expect']} and {slack['expect']}"
    assert tool["output"] == sshpass["expect"]
    everything = json.dumps(view, ensure_ascii=False)
    for case in (aws, twilio, sshpass, slack):
        assert not _leaks(case, everything), case["description"]
    await eventually(lambda: phone.shown() == shown(view))  # the live path masks alike
    await phone.stop()
