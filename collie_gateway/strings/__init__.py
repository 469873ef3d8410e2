"""Every string the phone shows, keyed, per language, and overridable (spec: strings in
"double quotes").

The catalogues are data files of this package, one per language: ``en.json`` (the spec's
English, the fallback of every other), ``it.json`` (the Italian seed's own wording where it
gives one), ``pt-BR.json``. Adding a language is adding a file named by its tag. A value is a
text, or an object of texts by CLDR plural category (``{"one": …, "other": …}``), chosen by the
value named ``n``. Placeholders use ``str.format`` names: ``{name}``. A key missing in a
language reads the English text.

Usage: ``Catalogue()["t_decided"]``, ``Catalogue(lang="it").fmt("card_caption", agent="desk")``,
``Catalogues.load(default="en").choose("it-IT,it;q=0.9", None).lang == "it"``.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Final

from babel import Locale, UnknownLocaleError

from collie_gateway.strings.language import canonical, choose_language

__all__ = [
    "DEFAULTS",
    "LANGUAGES",
    "PLURAL_CATEGORIES",
    "Catalogue",
    "Catalogues",
    "Text",
    "canonical",
    "choose_language",
    "language_file",
]

#: A catalogue value: one text, or texts by CLDR plural category.
Text = str | Mapping[str, str]

PLURAL_CATEGORIES: Final = frozenset({"zero", "one", "two", "few", "many", "other"})


def _shipped() -> dict[str, dict[str, Text]]:
    """Every catalogue file of this package, by language tag (the file's name)."""
    found: dict[str, dict[str, Text]] = {}
    for entry in resources.files(__name__).iterdir():
        if entry.name.endswith(".json"):
            tag = entry.name.removesuffix(".json")
            found[tag] = _texts(json.loads(entry.read_text(encoding="utf-8")), f"{entry.name}: ")
    return found


def _texts(data: object, where: str) -> dict[str, Text]:
    """``data`` as catalogue values, or ValueError starting with ``where``."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}expected a JSON object of strings")
    out: dict[str, Text] = {}
    for key, value in data.items():
        if isinstance(value, str):
            out[key] = value
        elif (
            isinstance(value, dict)
            and "other" in value
            and set(value) <= PLURAL_CATEGORIES
            and all(isinstance(v, str) for v in value.values())
        ):
            out[key] = dict(value)
        else:
            raise ValueError(
                f"{where}{key!r} must be a string or an object of plural forms "
                f"({', '.join(sorted(PLURAL_CATEGORIES))}) with at least 'other'"
            )
    return out


_SHIPPED: Final = _shipped()
#: The English catalogue: every key, and the fallback of every language.
DEFAULTS: Final[Mapping[str, str]] = {
    k: v if isinstance(v, str) else v["other"] for k, v in _SHIPPED["en"].items()
}
#: The languages this package ships, English first.
LANGUAGES: Final = ("en", *sorted(tag for tag in _SHIPPED if tag != "en"))


def language_file(lang: str) -> Mapping[str, Text]:
    """The shipped catalogue of ``lang`` as its file holds it (empty for an unknown one)."""
    return _SHIPPED.get(lang, {})


class Catalogue:
    """One language's strings: English, that language's file, then overrides on top.

    Usage: ``Catalogue()["t_decided"]``, ``cat.fmt("card_caption", agent="desk")``,
    ``Catalogue({"send": "Go"}, lang="it")``.
    """

    def __init__(self, overrides: Mapping[str, Text] | None = None, *, lang: str = "en") -> None:
        try:
            self.locale: Final = Locale.parse(lang, sep="-")
        except (UnknownLocaleError, ValueError):
            raise ValueError(f"unknown language {lang!r}") from None
        self.lang: Final = lang
        merged: dict[str, Text] = {**_SHIPPED["en"], **_SHIPPED.get(lang, {})}
        for key, text in (overrides or {}).items():
            _check(key, text)
            merged[key] = text
        self._texts = merged

    def __getitem__(self, key: str) -> str:
        return _form(self._texts[key], "other")

    def texts(self) -> dict[str, str]:
        """Every string (plural keys: their ``other`` form), overrides applied."""
        return {key: _form(text, "other") for key, text in self._texts.items()}

    def plurals(self) -> dict[str, dict[str, str]]:
        """The keys with plural forms, each form by CLDR category (what the web page needs
        beside ``texts`` to count in this language)."""
        return {k: dict(t) for k, t in self._texts.items() if not isinstance(t, str)}

    def fmt(self, key: str, **values: object) -> str:
        """The string ``key`` with its placeholders filled; a plural key takes the form CLDR's
        rule for this language gives the value ``n``."""
        text = self._texts[key]
        count = values.get("n")
        form = "other"
        if not isinstance(text, str) and isinstance(count, int | float):
            form = self.locale.plural_form(abs(count))
        return _form(text, form).format(**values)

    @classmethod
    def from_file(cls, path: Path) -> Catalogue:
        """The default language (English) with the flat overrides of a ``--strings`` file.

        Raises:
            ValueError: as ``Catalogues.from_file``; the message names the file.
        """
        return Catalogues.from_file(path).default


class Catalogues:
    """Every language the gateway speaks, each one ``Catalogue``, and the default.

    Usage: ``Catalogues.load(default="it")``; ``cats.choose(accept_language, query).fmt(…)``.
    """

    def __init__(self, catalogues: Mapping[str, Catalogue], default: str) -> None:
        if default not in catalogues:
            raise ValueError(f"unknown language {default!r}: known are {', '.join(catalogues)}")
        self._by_lang = dict(catalogues)
        self.default: Final = self._by_lang[default]

    @property
    def languages(self) -> tuple[str, ...]:
        """Every language tag, the default first."""
        return (self.default.lang, *(t for t in self._by_lang if t != self.default.lang))

    def get(self, lang: str) -> Catalogue:
        """The catalogue of ``lang`` (a tag as ``languages`` spells it), else the default's."""
        return self._by_lang.get(lang, self.default)

    def choose(self, accept_language: str | None, query_lang: str | None = None) -> Catalogue:
        """The catalogue a request asks for: its ``Accept-Language``, else ``?lang=``, else
        the default (see ``choose_language``)."""
        return self.get(
            choose_language(accept_language, query_lang, self.languages, self.default.lang)
        )

    @classmethod
    def around(cls, default: Catalogue) -> Catalogues:
        """The shipped languages, with ``default`` (a catalogue built by hand, overrides and
        all) as the default and its language's catalogue."""
        by_lang = {tag: Catalogue(lang=tag) for tag in LANGUAGES if tag != default.lang}
        return cls({default.lang: default, **by_lang}, default.lang)

    @classmethod
    def load(
        cls, default: str = "en", overrides: Mapping[str, Mapping[str, Text]] | None = None
    ) -> Catalogues:
        """The shipped languages plus any ``overrides`` names, each with its overrides.

        Raises:
            ValueError: an unknown default, a language Babel does not know, or an override
                with an unknown key or placeholder.
        """
        extra = overrides or {}
        default = canonical(default, (*LANGUAGES, *extra)) or default
        tags = dict.fromkeys((*LANGUAGES, *extra, default))
        return cls({tag: Catalogue(extra.get(tag), lang=tag) for tag in tags}, default)

    @classmethod
    def from_file(cls, path: Path, default: str = "en") -> Catalogues:
        """Load a ``--strings`` file: a flat ``{"key": "text"}`` overrides the default
        language; ``{"it": {"key": "text"}, …}`` overrides (or adds) each language named.

        Raises:
            ValueError: the file cannot be read, is not such an object, or names an unknown
                key, placeholder or language; the message names the file.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValueError(f"--strings {path}: {exc.strerror or exc}") from None
        except ValueError as exc:  # not UTF-8, or not JSON
            raise ValueError(f"--strings {path}: not a JSON file ({exc})") from None
        try:
            return cls.load(default, _per_language(data, default))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"--strings {path}: {exc.args[0]}") from None


def _per_language(data: object, default: str) -> dict[str, dict[str, Text]]:
    """A ``--strings`` object as overrides by language (a flat one is the default's)."""
    if (
        isinstance(data, dict)
        and data
        and all(isinstance(v, dict) and k not in DEFAULTS for k, v in data.items())
    ):
        return {str(k): _texts(v, f"[{k}] ") for k, v in data.items()}
    return {default: _texts(data, "")}


def _check(key: str, text: Text) -> None:
    """Raise when ``key`` is unknown or ``text`` uses placeholders English does not."""
    if key not in DEFAULTS:
        raise KeyError(f"unknown string key {key!r}")
    wanted = _fields(DEFAULTS[key])
    forms = [text] if isinstance(text, str) else list(text.values())
    if any(_fields(form) - wanted for form in forms):
        raise ValueError(f"string {key!r} uses placeholders other than {sorted(wanted)}")


def _form(text: Text, category: str) -> str:
    if isinstance(text, str):
        return text
    return text.get(category) or text["other"]


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def _check_shipped() -> None:
    """Refuse, at import, a shipped file with a key or a placeholder English lacks."""
    for tag, texts in _SHIPPED.items():
        for key, text in texts.items():
            try:
                _check(key, text)
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{tag}.json: {exc.args[0]}") from None


_check_shipped()
