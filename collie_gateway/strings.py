"""Every string the phone shows, keyed and overridable (spec: strings in "double quotes").

Keys marked † in the spec are translations of the Italian seed. Placeholders use
``str.format`` names: ``{name}``. Override with a JSON file of ``{"key": "text"}``.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from wire.answers import SENTENCES as ANSWER_SENTENCES

DEFAULTS: Final[Mapping[str, str]] = {
    # D — dashboard
    "section_durable_agents": "Durable agents",
    "badge_experimental": "Experimental",
    "runtime_default": "durable",
    "reach_local": "local",
    "reach_remote": "remote",
    "row_line2": "{runtime}, {reach}",
    "row_line2_member": "{runtime}, {reach}, {member}",
    "section_durable_agents_member": "Durable agents · {machine}",  # ours (W1)
    "crew_starting": "Connecting to {machine}…",  # ours
    "crew_unreachable": "{machine} is not answering. Its agents show as last seen.",  # ours
    "crew_unauthorized": "{machine} did not accept this gateway's crew token.",  # ours
    "crew_no_answer": "{machine} did not answer. Try again in a moment.",  # ours
    "state_starting": "Starting",
    "state_unreachable": "Unreachable",
    "state_version_mismatch": "Version mismatch",
    "setting_pending_only": "Show only panes with pending requests",  # †
    # L — conversation list
    "list_closed": "Closed",
    "list_untitled": "Untitled conversation",
    "list_reopen": "Reopen",
    "footer_load_more": "Load more",  # †
    "footer_no_list": "This durable agent doesn't keep a list of its conversations.",  # †
    "footer_no_answer": "The durable agent didn't answer. Try again in a moment.",  # †
    "footer_failed": "Couldn't load conversations. Try again.",  # †
    # L3 — time of last activity on a row (ours: the spec names it, not its words)
    "time_now": "now",
    "time_min": "{n} min",
    "time_h": "{n} h",
    "time_d": "{n} d",
    # R5 / V1 / L6 — one entry, versions filled in
    "version_mismatch": (
        "Program speaks wire v{theirs}, this Collie speaks v{ours}. "
        "Update Collie, or the durable agent's SDK."
    ),
    # A — cards
    "card_caption": "Needs your answer · {agent}",
    "expires_in_min": "Expires in {n} min",
    "expires_in_s": "Expires in {n} s",
    "expired": "Expired",
    "role_allow": "Allow",
    "role_always": "Always allow",
    "role_deny": "Deny",
    "role_cancel": "Cancel",
    "always_confirm": "Tap again to always allow",
    "pick_any": "Pick any number",
    "send": "Send",
    "text_counter": "{n} of {limit}",
    "required": "Required",
    "text_shortened": "Text shortened",
    "cannot_answer": "This ask cannot be answered from the phone.",
    "show_more": "Show {n} more",
    # T — after a tap
    "t_decided": "Decided in the durable agent.",
    "t_expired": "Timed out before an answer.",  # †
    "t_answered": "Already answered. This card goes away on the next refresh.",  # †
    "t_not_open": "Not accepted. This ask may come back shortly.",  # †
    "t_changed": "This ask changed. Read it again, then tap an answer.",  # †
    "t_uncertain": "Not sure the answer arrived. Retry sends it once more.",  # †
    "t_retry": "Retry",  # †
    "t_maybe_applied": "Your answer may already have been applied. Check the chat.",  # †
    "t_refused": "The answer was refused.",  # †
    "t_older_collie": (
        "This machine runs an older Collie and can't take answers here. "
        "Update it, or answer in the durable agent."
    ),  # †
    # Ours — an answer that does not fit its ask (wire §8), refused before it is sent: the
    # keys are "answer_" and the misfit's code, the defaults the wire's own sentences.
    **{f"answer_{code}": sentence for code, sentence in ANSWER_SENTENCES.items()},
    "refused_conflict": "This request id was already used for another answer.",  # ours
    "refused_always": '"Always allow" needs a second tap.',  # ours (A5)
    "refused_always_hidden": (
        '"Always allow" is not offered for this ask: the whole text was not shown.'
    ),  # ours (A5, A6)
    # S1 / S8 — what a call will use, why it waits, irreversible (S8's keys and words)
    "argumentsTitle": "What it will use",
    "origin_typed": "you typed it",
    "origin_reply": "you answered it",
    "origin_context": "from your account",
    "origin_computed": "calculated",
    "origin_result": "from an earlier step",
    "origin_model": "the assistant wrote it",
    "origin_agent": "from another assistant",
    "reasonsTitle": "Why this needs you",
    "irreversible": "Nothing can undo this step once it runs.",
    # R — receipts
    "receipt_expired": "Timed out before an answer:",
    "receipt_decided": "Decided in the durable agent:",
    # C — chat
    "chat_stopped": "stopped",
    "chat_sent": "Sent",
    "chat_not_confirmed": "Sending, not confirmed",
    "chat_not_sent": "Not sent",
    # H — header
    "progress_step": "Step {n} of {total}: {label}",  # †
    "progress_percent": "{percent}%: {label}",  # †
    # B — bottom bar
    "bar_steer": "Steer",
    "bar_stop": "Stop",
    "moved_on": "The conversation moved on, so the action did not run.",
    # G1 — a command for a feature the agent did not declare (ours)
    "refused_unsupported": "This durable agent doesn't offer that.",
    # Ours: what the phone reads when an agent could not be reached or understood; the
    # detail (exception names, addresses) goes to the log only.
    "error_no_answer": "The durable agent didn't answer. Try again in a moment.",
    "error_not_understood": "The durable agent's answer could not be read.",
    "error_refused": "The durable agent refused this.",
    # G2 — pane menu
    "menu_close": "Close conversation",
    # N — new conversation
    "new_title": "New conversation",
    "no_starters": "This machine's durable agent offers no starters yet.",
    "no_starter": "No starter named “{starter}”.",  # ours: a start the agent answered not_found
    # P — push
    "push_permission": "Permission needed in {pane}",
    "push_many": "A durable agent on {host} is raising many asks",
    "push_private": "A durable agent needs your answer",
    "push_test": "Notifications from {host} arrive on this device",  # ours: a device's test
    # The web companion (ours: words the page adds around the phone's screens)
    "web_title": "Collie",
    "web_spaces": "Spaces",
    "web_back": "Back",
    "web_menu": "Conversation menu",
    "web_placeholder": "Write a message",
    "web_count_open": "{n} open",
    "web_count_waiting": "{n} waiting",
    "web_working": "The durable agent is working",
    "web_sending": "Sending",
    "web_writing": "Still being written",
    "web_thinking": "Thinking",
    "web_tool_running": "running",
    "web_tool_done": "done",
    "web_tool_failed": "failed",
    "web_tool_denied": "denied",
    "web_token_title": "This gateway needs its token",
    "web_token_label": "Token",
    "web_token_save": "Continue",
    "web_token_wrong": "That token was not accepted.",
    "web_reconnecting": "Reconnecting…",
    "web_loading": "Loading…",
    "web_failed": "Couldn't reach the gateway. Try again.",
    "web_retry": "Try again",
    "web_empty_list": "No conversations yet.",
    "web_status_idle": "Idle",
    "web_status_working": "Working",
    "web_status_waiting": "Waiting for you",
    "web_status_closed": "Closed",
    "web_notify": "Notifications on this device",
    "web_notify_on": "Notifications are on for this device.",
    "web_notify_denied": "This browser does not allow notifications here.",
    "web_notify_failed": "Notifications could not be turned on.",
    "web_push_health": "Notifications",
    "web_provider_apns": "Apple (APNs)",
    "web_provider_fcm": "Google (FCM)",
    "web_provider_webpush": "Web Push",
    "web_push_ok": "{provider}: last delivered {at}",
    "web_push_failing": "{provider}: failing since {at} ({reason})",
}


class Catalogue:
    """The phone's strings: the defaults, with overrides on top.

    Usage: ``Catalogue()["t_decided"]``, ``cat.fmt("card_caption", agent="desk")``.
    """

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        merged = dict(DEFAULTS)
        for key, text in (overrides or {}).items():
            if key not in DEFAULTS:
                raise KeyError(f"unknown string key {key!r}")
            wanted = _fields(DEFAULTS[key])
            if _fields(text) - wanted:
                raise ValueError(f"string {key!r} uses placeholders other than {sorted(wanted)}")
            merged[key] = text
        self._texts = merged

    def __getitem__(self, key: str) -> str:
        return self._texts[key]

    def texts(self) -> dict[str, str]:
        """Every string, overrides applied (what the web companion draws with)."""
        return dict(self._texts)

    def fmt(self, key: str, **values: object) -> str:
        """The string ``key`` with its placeholders filled."""
        return self._texts[key].format(**values)

    @classmethod
    def from_file(cls, path: Path) -> Catalogue:
        """Load overrides from a JSON object of ``{"key": "text"}``.

        Raises:
            ValueError: the file cannot be read, is not such an object, or names an unknown
                key; the message names the file.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValueError(f"--strings {path}: {exc.strerror or exc}") from None
        except ValueError as exc:  # not UTF-8, or not JSON
            raise ValueError(f"--strings {path}: not a JSON file ({exc})") from None
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            raise ValueError(f"--strings {path}: expected a JSON object of strings")
        try:
            return cls(data)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"--strings {path}: {exc.args[0]}") from None


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}
