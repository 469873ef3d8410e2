"""The whole suite's conventions for running in parallel (pytest-xdist: the default, set in
pyproject.toml, is ``-n 3 --dist loadgroup``; ``-n 0`` runs every test in one process).

Tests run on several worker processes at once, so a test owns what it touches:

- files: a fresh folder per test (``tmp_path``, or ``short_dir()`` for Unix sockets), never a
  fixed path;
- ports: port 0 (the kernel picks a free one), never a fixed number;
- environment: ``monkeypatch.setenv`` (each worker is its own process);
- PostgreSQL: the ``pg_url`` fixture, a fresh database per test on the one server; a query of
  the server's own views (``pg_locks``, ``pg_stat_activity``) keeps to ``current_database()``.

A scene built once and shared by several tests (a fixture of ``module``, ``class`` or
``package`` scope, e.g. the crew of ``test_crew.py``) needs its tests on one worker, in file
order: every test that uses such a fixture is put in the ``xdist_group`` named after its
own module here, so a new test file with a module-scoped scene needs nothing more. A group of
tests sharing something else (a scene built by hand, a file they take turns on) marks itself:
``pytestmark = pytest.mark.xdist_group("name")``. Session-scoped fixtures are built once per
worker; keep them read-only.
"""

from __future__ import annotations

import sys

import pytest

SHARED_SCOPES = frozenset({"module", "class", "package"})


def pytest_configure(config: pytest.Config) -> None:
    # Known to --strict-markers even when xdist is not installed.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one worker")
    config.pluginmanager.register(_GroupSuffix(), "collie-xdist-group-suffix")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group every test that shares a scene wider than itself (see the module's docstring)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        group = _shared_scene(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items[:] = sorted(items, key=_first_the_longest)


def _first_the_longest(item: pytest.Item) -> int:
    """Groups run on one worker each, whole: the named ones (many processes each, minutes),
    then the scenes, then the tests alone, so that no long group starts last and runs alone
    at the end (a stable sort: each group keeps its order)."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return 2
    name = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
    return 1 if "/" in name else 0


def _shared_scene(item: pytest.Item) -> str | None:
    """``item``'s module if it uses a module-, class- or package-scoped fixture."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for defs in info.name2fixturedefs.values():
        for fixture in defs:
            if fixture.scope in SHARED_SCOPES:
                return item.nodeid.split("::", 1)[0]
    return None


class _GroupSuffix:
    """``--dist loadgroup`` reads a test's group from a ``@group`` suffix of its node id,
    which xdist 3.8 writes where pytest 9.2 no longer reads it (pytest-xdist#1386):
    on a worker, write it where it is read, unless xdist did."""

    @pytest.hookimpl(trylast=True)  # after xdist's own hook
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if not getattr(config.option, "loadgroup", False):
            return
        for item in items:
            mark = item.get_closest_marker("xdist_group")
            if mark is None or "@" in item.nodeid.rpartition("]")[2]:
                continue
            name = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
            ids = sys.modules.get("_pytest.nodeid")  # pytest 9.2's structured node ids
            if ids is not None and isinstance(getattr(item, "_id", None), ids.NodeId):
                item._id = ids.NodeId.parse(f"{item.nodeid}@{name}")
