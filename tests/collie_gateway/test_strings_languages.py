"""The phone's languages (issue 26): catalogue files, fallback, choice of language, plurals.

Pure: the catalogue package, the views that word things, no server.
"""

from __future__ import annotations

import json
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from babel.units import format_unit

from collie_gateway.core.answers import CardState, TapOutcome
from collie_gateway.core.notes import NOTE_WORDS, Note
from collie_gateway.strings import (
    DEFAULTS,
    LANGUAGES,
    PLURAL_CATEGORIES,
    Catalogue,
    Catalogues,
    choose_language,
    language_file,
)
from collie_gateway.strings.language import ranges
from collie_gateway.views.cards import outcome_line
from collie_gateway.views.clock import expires_label, relative_time
from wire.answers import SENTENCES

NOW = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
KNOWN = ("en", "it", "pt-BR")

# The Italian seed's own wording (seeds/003_…, the strings the English spec marks † and the
# T1 table's Italian sentences; R2 gives "Decided in the durable agent." as "Risolto
# nell'agente durevole."), with the catalogue key each one is.
SEED_IT = {
    "setting_pending_only": "Mostra solo riquadri con richieste in sospeso",
    "footer_load_more": "Carica altri",
    "footer_no_list": "Questo durable agent non conserva un elenco delle sue conversazioni.",
    "footer_no_answer": "Il durable agent non ha risposto. Riprovare tra un momento.",
    "footer_failed": "Impossibile caricare le conversazioni. Riprovare.",
    "t_decided": "Risolto nell'agente durevole.",
    "t_expired": "Tempo scaduto prima di una risposta.",
    "t_answered": "Già risposto. Questa scheda scompare al prossimo aggiornamento.",
    "t_not_open": "Non accettata. La domanda potrebbe ricomparire a breve.",
    "t_changed": "Questa richiesta è cambiata. Rileggerla, poi toccare una risposta.",
    "t_uncertain": ("Non è certo che la risposta sia arrivata. Riprova la invia un'altra volta."),
    "t_retry": "Riprova",
    "t_maybe_applied": "Potrebbe essere già applicata. Controllare la chat.",
    "t_refused": "La risposta è stata rifiutata.",
    "t_older_collie": (
        "Questa macchina esegue una versione precedente di Collie e non può ricevere "
        "risposte qui. Aggiornarla oppure rispondere nell'agente durevole."
    ),
    "send": "Invia",
}
SEED_IT_FILLED = {
    # L6 / R5: the seed's example, versions filled in
    ("version_mismatch", (("theirs", 2), ("ours", 1))): (
        "Il durable agent utilizza il protocollo wire v2, questa versione di Collie utilizza "
        "la v1. Aggiornare Collie o l'SDK dell'agente."
    ),
    ("progress_step", (("n", 2), ("total", 3), ("label", "Salva una nota"))): (
        "Passaggio 2 di 3: Salva una nota"
    ),
    ("progress_percent", (("percent", 42), ("label", "caricamento in corso"))): (
        "42%: caricamento in corso"
    ),
}


def _placeholders(text: str) -> list[tuple[str, str | None, str]]:
    """Each placeholder's name, conversion and format spec, in order of appearance sorted."""
    return sorted(
        (name, conv, spec or "")
        for _, name, spec, conv in string.Formatter().parse(text)
        if name is not None
    )


def test_languages_shipped_english_first() -> None:
    assert LANGUAGES == KNOWN


@pytest.mark.parametrize("lang", KNOWN)
def test_every_catalogue_has_every_key_with_the_same_placeholders(lang: str) -> None:
    texts = language_file(lang)
    assert list(texts) == list(DEFAULTS)
    for key, text in texts.items():
        forms = {"": text} if isinstance(text, str) else dict(text)
        assert set(forms) <= PLURAL_CATEGORIES | {""}, key
        for form in forms.values():
            assert form.strip(), key
            assert _placeholders(form) == _placeholders(DEFAULTS[key]), (lang, key, form)
            form.format(**{name: 1 for name, _, _ in _placeholders(form)})


def test_english_misfit_sentences_are_the_wires() -> None:
    assert {k: v for k, v in DEFAULTS.items() if k.startswith("answer_")} == {
        f"answer_{code}": sentence for code, sentence in SENTENCES.items()
    }


def test_catalogue_files_are_package_data() -> None:
    here = Path(__file__).resolve().parents[2]
    toml = (here / "pyproject.toml").read_text(encoding="utf-8")
    assert '"collie_gateway.strings" = ["*.json"]' in toml
    for lang in KNOWN:
        json.loads((here / "collie_gateway" / "strings" / f"{lang}.json").read_text("utf-8"))


@pytest.mark.parametrize(("key", "seed"), sorted(SEED_IT.items()))
def test_italian_is_the_seeds_own_wording(key: str, seed: str) -> None:
    assert Catalogue(lang="it")[key] == seed


@pytest.mark.parametrize(("key_values", "seed"), sorted(SEED_IT_FILLED.items()))
def test_italian_filled_is_the_seeds_example(
    key_values: tuple[str, tuple[tuple[str, object], ...]], seed: str
) -> None:
    key, values = key_values
    assert Catalogue(lang="it").fmt(key, **dict(values)) == seed


@pytest.mark.parametrize(
    ("outcome", "retry", "seed"),
    [
        (TapOutcome.DECIDED, False, SEED_IT["t_decided"]),
        (TapOutcome.EXPIRED, False, SEED_IT["t_expired"]),
        (TapOutcome.ANSWERED, False, SEED_IT["t_answered"]),
        (TapOutcome.NOT_OPEN, False, SEED_IT["t_not_open"]),
        (TapOutcome.CHANGED, False, SEED_IT["t_changed"]),
        (TapOutcome.UNCERTAIN, False, SEED_IT["t_uncertain"]),
        (TapOutcome.CHANGED, True, SEED_IT["t_maybe_applied"]),
        (TapOutcome.REFUSED, False, SEED_IT["t_refused"]),
        (TapOutcome.OLDER_COLLIE, False, SEED_IT["t_older_collie"]),
    ],
)
def test_T1_each_row_in_italian_is_the_seeds(outcome: TapOutcome, retry: bool, seed: str) -> None:
    state = CardState(outcome=outcome, request_id="r-1", retry=retry)
    line = outcome_line(state, Catalogue(lang="it"))
    assert line.line == seed
    assert line.retry_label == ("Riprova" if outcome is TapOutcome.UNCERTAIN else None)


def test_T1_accepted_closes_the_card_in_every_language() -> None:
    for lang in KNOWN:
        state = CardState(outcome=TapOutcome.ACCEPTED, request_id="r-1")
        assert outcome_line(state, Catalogue(lang=lang)).line is None


def test_a_missing_key_reads_english_never_the_key_name() -> None:
    french = Catalogues.load(overrides={"fr": {"send": "Envoyer"}}).get("fr")
    assert french.lang == "fr"
    assert french["send"] == "Envoyer"
    assert french["t_decided"] == "Decided in the durable agent."
    assert {k: v for k, v in french.texts().items() if k != "send"} == {
        k: v for k, v in DEFAULTS.items() if k != "send"
    }
    for lang in KNOWN:
        texts = Catalogue(lang=lang).texts()
        assert all(texts[k] != k for k in DEFAULTS if k != "runtime_default"), lang


def test_a_language_without_a_file_is_english() -> None:
    assert Catalogue(lang="de").texts() == dict(DEFAULTS)


def test_an_unknown_language_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown language 'xx-nowhere'"):
        Catalogue(lang="xx-nowhere")
    with pytest.raises(ValueError, match="unknown language 'xq'"):
        Catalogues.load(default="xq")


# --- which language -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "query", "lang"),
    [
        (None, None, "en"),
        ("", None, "en"),
        ("it", None, "it"),
        ("it-IT", None, "it"),
        ("IT-it", None, "it"),
        ("it-IT,it;q=0.9,en-US;q=0.8,en;q=0.7", None, "it"),
        ("pt-BR", None, "pt-BR"),
        ("pt-br", None, "pt-BR"),
        ("pt", None, "pt-BR"),
        ("pt-PT", None, "pt-BR"),
        ("pt_BR", None, "pt-BR"),
        ("fr", None, "en"),
        ("fr-FR, fr;q=0.9", None, "en"),
        ("fr, it;q=0.5", None, "it"),
        ("en;q=0.5, it;q=0.8", None, "it"),
        ("it;q=0.8, pt-BR;q=0.8", None, "it"),  # equal quality: the header's order
        ("it;q=0, en", None, "en"),  # q=0: not acceptable
        ("it;q=0", None, "en"),
        ("en-GB", "it", "en"),  # the header first
        ("fr", "it", "it"),  # a header naming nothing known falls to ?lang=
        (None, "pt", "pt-BR"),
        (None, "it-CH", "it"),
        (None, "klingon", "en"),
        ("*", "it", "it"),
        ("it;q=abc, pt;q=2, en", None, "en"),  # unreadable qualities are dropped
        (";;;,,,=;q", None, "en"),
        ("it;Q=0.4, pt-BR;q=0.3", None, "it"),
        ("x" * 5000, None, "en"),
        ("\x00it\u202e", None, "en"),
    ],
)
def test_language_from_header_then_query_then_default(
    header: str | None, query: str | None, lang: str
) -> None:
    assert choose_language(header, query, KNOWN, "en") == lang


def test_language_default_is_the_gateways() -> None:
    assert choose_language("fr", None, KNOWN, "it") == "it"
    cats = Catalogues.load(default="it")
    assert cats.default.lang == "it"
    assert cats.languages == ("it", "en", "pt-BR")
    assert cats.choose(None).fmt("expires_in_min", n=4) == "Scade tra 4 min"
    assert cats.choose("en-US").fmt("expires_in_min", n=4) == "Expires in 4 min"
    assert Catalogues.load(default="pt").default.lang == "pt-BR"


def test_a_long_header_reads_a_bounded_number_of_ranges() -> None:
    header = ", ".join(["fr"] * 100 + ["it"])
    assert ranges(header) == ["fr"] * 32
    assert choose_language(header, None, KNOWN, "en") == "en"


def test_choose_gives_that_languages_catalogue() -> None:
    cats = Catalogues.load()
    assert cats.choose("it-IT,it;q=0.9")["send"] == "Invia"
    assert cats.choose("pt")["send"] == "Enviar"
    assert cats.choose("fr")["send"] == "Send"
    assert cats.choose(None, "pt-BR")["send"] == "Enviar"
    assert cats.get("it") is cats.choose("it")  # one catalogue per language, built once


# --- relative times and plurals (CLDR through Babel) ----------------------------------------


@pytest.mark.parametrize(
    ("lang", "left", "label"),
    [
        ("en", timedelta(minutes=4, seconds=59), "Expires in 4 min"),
        ("en", timedelta(seconds=40), "Expires in 40 s"),
        ("en", timedelta(seconds=0), "Expired"),
        ("it", timedelta(minutes=4), "Scade tra 4 min"),
        ("it", timedelta(minutes=1), "Scade tra 1 min"),
        ("it", timedelta(seconds=40), "Scade tra 40 s"),
        ("it", timedelta(seconds=-1), "Scaduta"),
        ("pt-BR", timedelta(minutes=4), "Expira em 4 min"),
        ("pt-BR", timedelta(seconds=40), "Expira em 40 s"),
        ("pt-BR", timedelta(seconds=0.2), "Expira em 1 s"),
        ("pt-BR", timedelta(0), "Expirou"),
    ],
)
def test_A3_countdown_in_each_language(lang: str, left: timedelta, label: str) -> None:
    assert expires_label(NOW + left, NOW, Catalogue(lang=lang)) == label


@pytest.mark.parametrize(
    ("lang", "ago", "label"),
    [
        ("en", timedelta(seconds=30), "now"),
        ("en", timedelta(minutes=5), "5 min"),
        ("en", timedelta(hours=3), "3 h"),
        ("en", timedelta(days=1), "1 d"),
        ("en", timedelta(days=2), "2 d"),
        ("it", timedelta(seconds=30), "ora"),
        ("it", timedelta(days=1), "1 giorno"),
        ("it", timedelta(days=2, hours=5), "2 giorni"),
        ("pt-BR", timedelta(seconds=59), "agora"),
        ("pt-BR", timedelta(days=1), "1 dia"),
        ("pt-BR", timedelta(days=21), "21 dias"),
    ],
)
def test_L3_row_age_in_each_language(lang: str, ago: timedelta, label: str) -> None:
    assert relative_time(NOW - ago, NOW, Catalogue(lang=lang)) == label


@pytest.mark.parametrize("lang", ["it", "pt-BR"])
def test_L3_A3_units_are_cldrs_short_units(lang: str) -> None:
    cat = Catalogue(lang=lang)
    units = {
        "time_min": "duration-minute",
        "time_h": "duration-hour",
        "time_d": "duration-day",
    }
    for key, unit in units.items():
        for n in range(1000):
            assert cat.fmt(key, n=n) == format_unit(n, unit, length="short", locale=cat.locale)
    for n in range(1, 60):
        said = format_unit(n, "duration-second", length="short", locale=cat.locale)
        assert cat.fmt("expires_in_s", n=n).endswith(" " + said)


def test_plural_forms_follow_cldr_rules() -> None:
    it, pt = Catalogue(lang="it"), Catalogue(lang="pt-BR")
    counts = (0, 1, 2)
    assert [it.fmt("web_count_open", n=n) for n in counts] == ["0 aperte", "1 aperta", "2 aperte"]
    # CLDR's rule for Portuguese: 0 and 1 take the singular
    assert [pt.fmt("web_count_open", n=n) for n in counts] == ["0 aberta", "1 aberta", "2 abertas"]
    assert it["web_count_open"] == "{n} aperte"  # a lookup without a count: "other"
    assert it.plurals()["time_d"] == {"one": "{n} giorno", "other": "{n} giorni"}
    assert Catalogue().plurals() == {}
    # a count given as a placeholder template keeps the other form
    assert it.fmt("web_count_open", n="{n}") == "{n} aperte"


# --- --strings ------------------------------------------------------------------------------


def test_strings_flat_file_overrides_the_default_language(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"send": "Go"}', encoding="utf-8")
    assert Catalogue.from_file(path)["send"] == "Go"
    cats = Catalogues.from_file(path, default="it")
    assert cats.default["send"] == "Go"
    assert cats.get("en")["send"] == "Send"
    assert cats.get("pt-BR")["send"] == "Enviar"


def test_strings_per_language_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            {
                "it": {"send": "Manda", "time_d": {"one": "{n} g", "other": "{n} gg"}},
                "en": {"send": "Go"},
                "fr": {"send": "Envoyer"},
            }
        ),
        encoding="utf-8",
    )
    cats = Catalogues.from_file(path)
    assert cats.languages == ("en", "it", "pt-BR", "fr")
    assert (cats.get("it")["send"], cats.get("en")["send"], cats.get("fr")["send"]) == (
        "Manda",
        "Go",
        "Envoyer",
    )
    assert cats.get("it").fmt("time_d", n=1) == "1 g"
    assert cats.get("it")["t_expired"] == SEED_IT["t_expired"]  # the rest: the shipped file
    assert cats.choose("fr-CA")["send"] == "Envoyer"


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        ('{"no_such_key": "x"}', "unknown string key 'no_such_key'"),
        ('{"it": {"no_such_key": "x"}}', "unknown string key 'no_such_key'"),
        ('{"send": "{who}"}', "string 'send' uses placeholders other than []"),
        ('{"it": {"time_d": {"one": "{n} g"}}}', "'time_d' must be a string or an object"),
        ('{"time_d": {"few": "{n}", "lots": "x", "other": "{n}"}}', "'time_d' must be"),
        ('{"send": 3}', "'send' must be a string"),
        ("[1, 2]", "expected a JSON object of strings"),
        ('{"xq": {"send": "x"}}', "unknown language 'xq'"),
        ("{not json", "not a JSON file"),
    ],
)
def test_strings_bad_file_is_named(tmp_path: Path, content: str, fault: str) -> None:
    path = tmp_path / "phone-strings.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=r"^--strings ") as caught:
        Catalogues.from_file(path)
    assert str(caught.value).startswith(f"--strings {path}: ")
    assert fault in str(caught.value)


def test_R3_C3_a_note_reads_in_each_language_and_an_older_one_as_stored() -> None:
    at = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
    receipt = Note(
        kind="receipt", text="Name the note", at=at, after_item=None, words="receipt_expired"
    )
    stopped = Note(kind="stopped", text="", at=at, after_item=None, words="chat_stopped")
    older = Note(kind="receipt", text="Timed out before an answer: Old", at=at, after_item=None)
    it, pt = Catalogue(lang="it"), Catalogue(lang="pt-BR")
    assert receipt.shown(it) == "Tempo scaduto prima di una risposta: Name the note"
    assert receipt.shown(Catalogue()) == "Timed out before an answer: Name the note"
    assert stopped.shown(pt) == "interrompido"
    assert older.shown(it) == "Timed out before an answer: Old"  # stored by an older gateway
    assert NOTE_WORDS == {
        "receipt_expired": "receipt",
        "receipt_decided": "receipt",
        "chat_stopped": "stopped",
    }
