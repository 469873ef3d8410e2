"""``collie-gateway``: serve the phone API, or run a demo with the sample agents.

Exit codes: 0 done, 1 failed while running, 2 bad configuration or usage.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.metadata
import json
import logging
import math
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric import ec

from collie_gateway import hooks_cli, phones_cli, serving
from collie_gateway.core.phones import spaced_fingerprint
from collie_gateway.core.redact import redactor_from_env
from collie_gateway.errors import ConfigError, GatewayError
from collie_gateway.logmask import mask_logs
from collie_gateway.phones_cli import DEFAULT_DB, check_db, db_arg, store_from
from collie_gateway.services.pushing import VAPID_SUBJECT
from collie_gateway.services.targets import PushTargets, TargetsFactory
from collie_gateway.settings import DEMO_STATE, Settings
from collie_gateway.sources import load_crew, load_sources
from collie_gateway.store.stores import check_store, shown_url
from collie_gateway.strings import Catalogue, Catalogues, canonical
from push import (
    ApnsClient,
    Content,
    FcmClient,
    Provider,
    PushSender,
    ServiceAccount,
    WebhookTarget,
    WebPushClient,
)
from push.apns import PRODUCTION_URL as APNS_PRODUCTION_URL
from push.apns import SANDBOX_URL as APNS_SANDBOX_URL
from push.fcm import FCM_URL

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
REPO = Path(__file__).resolve().parent.parent
# What the demo writes in its state folder (``--fresh`` removes these, nothing else).
DEMO_FILES = (
    *(
        f"{n}{x}"
        for n in ("desk", "pi-durable", "nohistory", "wire2", "collie")
        for x in (".db", ".db-wal", ".db-shm")
    ),
    *(f"{n}.sock" for n in ("desk", "nohistory", "wire2")),
    "wire2.log",
    "sources.json",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="collie-gateway",
        description="The backend of the Collie phone app for durable agents (wire v1).",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"collie-gateway {_version()}",
        help="print the version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="connect to the agents of a sources.json and serve the phone API",
        description="Connect to every agent named in sources.json and serve the phone API.",
    )
    serve.add_argument("--sources", type=Path, required=True, help="path of sources.json")
    serve.add_argument(
        "--machine", default=None, help="this machine's name in a crew (default: the host name)"
    )
    serve.add_argument(
        "--no-crew-answers",
        dest="crew_answers",
        action="store_false",
        help="as a crew member, take no answers given on a lead (they are answered here only)",
    )
    _common(serve, db_help="SQLite file (default: collie.db in the current folder)")
    demo = sub.add_parser(
        "demo",
        help="start the sample agents and a gateway for them",
        description="Start the sample agents (desk, pi-durable, nohistory, wire2) and a "
        f"gateway for them, then print where to look. Ctrl-C stops everything. Their files "
        f"are kept in one folder ({DEMO_STATE} unless --state-dir) and reused by the next run; "
        "--fresh starts over.",
    )
    _common(demo, db_help="SQLite file (default: collie.db in the state folder)")
    demo.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"where the demo keeps its agents' and the gateway's files, reused by the next "
        f"run (default: {DEMO_STATE})",
    )
    demo.add_argument(
        "--fresh",
        action="store_true",
        help="start over: remove the demo's files from the state folder first",
    )
    _bridge_parser(sub)
    phones_cli.add_commands(sub)
    hooks_cli.add_commands(sub)
    _relay_parser(sub)
    return parser


def _version() -> str:
    """The installed package's version (its metadata)."""
    try:
        return importlib.metadata.version("collie-gateway")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: pip install -e .)"


def _relay_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``relay``: the push relay an app's publisher runs (push/relay)."""
    from push.relay.cli import add_arguments

    relay = sub.add_parser(
        "relay",
        help="run the push relay for the native app (APNs/FCM credentials: as for serve)",
        description="A Web Push service in front of APNs and FCM that forwards encrypted "
        "pushes it cannot read. Credentials come from COLLIE_APNS_* and "
        "COLLIE_FCM_SERVICE_ACCOUNT, as for serve.",
    )
    add_arguments(relay)


def _relay(args: argparse.Namespace) -> int:
    from push.relay.cli import run

    factory = push_targets_from_env(os.environ)
    credentials = ("COLLIE_APNS_KEY_FILE", "COLLIE_FCM_SERVICE_ACCOUNT")
    if factory is None or not any(os.environ.get(name) for name in credentials):
        raise ConfigError("the relay needs APNs or FCM credentials (COLLIE_APNS_*, COLLIE_FCM_*)")
    content = Content(strings=Catalogue())
    return run(
        args,
        lambda: factory(content).senders,
        lambda app, host, port: serving.serve(app, host=host, port=port),
    )


def _bridge_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``bridge acp|mcp|langgraph …``: run a bridge by hand (the gateway runs the ones in
    sources.json)."""
    from bridges.acp.cli import add_arguments
    from bridges.langgraph.cli import DESCRIPTION as LANGGRAPH_DESCRIPTION
    from bridges.langgraph.cli import add_arguments as add_langgraph_arguments
    from bridges.mcp.cli import DESCRIPTION as MCP_DESCRIPTION
    from bridges.mcp.cli import add_arguments as add_mcp_arguments

    bridge = sub.add_parser(
        "bridge",
        help="serve an agent of another protocol as a durable agent",
        description="Serve an agent that speaks another protocol as a wire-v1 durable agent.",
    )
    kinds = bridge.add_subparsers(dest="bridge", required=True, metavar="KIND")
    acp = kinds.add_parser(
        "acp",
        help="an Agent Client Protocol agent, run as COMMAND",
        description="Serve an Agent Client Protocol agent (run as COMMAND, spoken to over its "
        "stdio) as a wire-v1 durable agent on a Unix socket.",
    )
    add_arguments(acp)
    mcp = kinds.add_parser(
        "mcp", help="MCP tools that ask the person, for any MCP host", description=MCP_DESCRIPTION
    )
    add_mcp_arguments(mcp)
    hooks_cli.add_bridge(kinds)
    langgraph = kinds.add_parser(
        "langgraph", help="a LangGraph graph, run here", description=LANGGRAPH_DESCRIPTION
    )
    add_langgraph_arguments(langgraph)


def _bridge(args: argparse.Namespace) -> int:
    if args.bridge == "hooks":
        return hooks_cli.run_bridge(args)
    if args.bridge == "mcp":
        from bridges.mcp.cli import run as run_mcp

        return run_mcp(args)
    if args.bridge == "langgraph":
        from bridges.langgraph.cli import run as run_langgraph

        return run_langgraph(args)
    from bridges.acp.cli import run

    return run(args)


def _common(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument(
        "--db",
        type=db_arg,
        default=None,
        help=db_help + "; its folder must exist, as --unix's. Or a postgresql:// URL (also "
        "COLLIE_DATABASE_URL): every process given one URL is a worker of one gateway",
    )
    p.add_argument("--host", default="127.0.0.1", help="address of the phone API (127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port of the phone API (8765)")
    p.add_argument(
        "--unix", type=Path, default=None, help="serve the phone API on this Unix socket (0600)"
    )
    p.add_argument(
        "--space", action="append", default=[], help="a space to show on the dashboard (repeat)"
    )
    p.add_argument(
        "--strings",
        type=Path,
        default=None,
        help='JSON file overriding phone strings: {"key": "text"}, or per language {"it": {…}}',
    )
    p.add_argument(
        "--lang", default="en", help="the phone's language when a request names none (en)"
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log INFO lines too (without it: warnings, e.g. an agent unreachable, once)",
    )
    phones_cli.add_serve_options(p)


def push_targets_from_env(environ: Mapping[str, str]) -> TargetsFactory | None:
    """The push targets the environment configures, or None.

    APNs: ``COLLIE_APNS_KEY_FILE`` (the .p8 key), ``COLLIE_APNS_KEY_ID``, ``COLLIE_APNS_TEAM_ID``,
    ``COLLIE_APNS_TOPIC``. FCM: ``COLLIE_FCM_SERVICE_ACCOUNT`` (the JSON file). Webhook (S6):
    ``COLLIE_WEBHOOK_URL`` and ``COLLIE_WEBHOOK_SECRETS`` (comma-separated, newest first).
    Elsewhere than Google's and Apple's hosts (a relay, a test double): ``COLLIE_APNS_URL``,
    ``COLLIE_FCM_URL``, and ``COLLIE_PUSH_CA_FILE`` (PEM: the CAs trusted for APNs, FCM, Web
    Push services and webhooks instead of the system's). Web Push needs no credentials (the
    gateway's VAPID key is in its store); ``COLLIE_VAPID_SUBJECT`` is the contact its pushes
    name (``mailto:`` or ``https://``).

    Raises:
        ConfigError: a setting is missing its partners, or a file cannot be read.
    """
    apns_keys = ("COLLIE_APNS_KEY_FILE", "COLLIE_APNS_KEY_ID", "COLLIE_APNS_TEAM_ID")
    apns_set = [k for k in (*apns_keys, "COLLIE_APNS_TOPIC") if environ.get(k)]
    if apns_set and len(apns_set) != 4:
        raise ConfigError("APNs needs all of " + ", ".join((*apns_keys, "COLLIE_APNS_TOPIC")))
    fcm_file = environ.get("COLLIE_FCM_SERVICE_ACCOUNT")
    hook_url = environ.get("COLLIE_WEBHOOK_URL")
    hook_secrets = [s for s in environ.get("COLLIE_WEBHOOK_SECRETS", "").split(",") if s]
    if hook_url and not hook_secrets:
        raise ConfigError("COLLIE_WEBHOOK_URL needs COLLIE_WEBHOOK_SECRETS")
    subject = environ.get("COLLIE_VAPID_SUBJECT") or VAPID_SUBJECT
    if not subject.startswith(("mailto:", "https://")):
        raise ConfigError(f"COLLIE_VAPID_SUBJECT is a mailto: or https:// contact: {subject!r}")
    ca_file = environ.get("COLLIE_PUSH_CA_FILE")
    if not (apns_set or fcm_file or hook_url or ca_file or environ.get("COLLIE_VAPID_SUBJECT")):
        return None
    try:
        apns_pem = Path(environ["COLLIE_APNS_KEY_FILE"]).read_bytes() if apns_set else None
        account = ServiceAccount.from_json(Path(fcm_file).read_bytes()) if fcm_file else None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"push credentials: {exc}") from None
    apns_url, fcm_url = environ.get("COLLIE_APNS_URL"), environ.get("COLLIE_FCM_URL")
    try:
        verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=ca_file) if ca_file else True
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"COLLIE_PUSH_CA_FILE: {exc}") from None

    def build(content: Content) -> PushTargets:
        senders: dict[Provider, PushSender] = {}
        if apns_pem is not None:
            senders[Provider.APNS] = ApnsClient(
                team_id=environ["COLLIE_APNS_TEAM_ID"],
                key_id=environ["COLLIE_APNS_KEY_ID"],
                signing_key=apns_pem,
                topic=environ["COLLIE_APNS_TOPIC"],
                content=content,
                verify=verify,
                # One host for both environments when pointed elsewhere (a relay, a double).
                production_url=apns_url or APNS_PRODUCTION_URL,
                sandbox_url=apns_url or APNS_SANDBOX_URL,
            )
        if account is not None:
            senders[Provider.FCM] = FcmClient(
                account, content=content, verify=verify, base_url=fcm_url or FCM_URL
            )
        hooks = [WebhookTarget(hook_url, hook_secrets, verify=verify)] if hook_url else []

        def webpush(key: ec.EllipticCurvePrivateKey) -> PushSender:
            return WebPushClient(vapid_key=key, subject=subject, content=content, verify=verify)

        return PushTargets(senders=senders, webhooks=hooks, webpush=webpush)

    return build


def check_args(args: argparse.Namespace) -> None:
    """Refuse, before anything starts or is printed, what cannot work: a port out of range, a
    ``--db`` that is a folder, a ``--db`` file or Unix socket in a folder that does not exist,
    a port another process holds.

    Raises:
        ConfigError: one sentence naming the option and the value.
    """
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not a port (0 to 65535)")
    check_db(args.db)
    if args.unix is not None:
        folder = args.unix.expanduser().absolute().parent
        if not folder.is_dir():
            raise ConfigError(f"--unix {args.unix}: the folder {folder} does not exist")
        return
    if args.port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as probe:
        # The same option aiohttp binds with: a port left in TIME_WAIT is not "in use".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((args.host, args.port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"port {args.port} on {args.host} is in use by another program "
                    "(another collie-gateway?): stop it, or choose another with --port"
                ) from None
            raise ConfigError(f"--host {args.host} --port {args.port}: {exc.strerror}") from None


def push_options_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """``Settings`` fields of push from the environment: ``COLLIE_PUSH_TTL`` (seconds a push
    without a deadline waits for an offline phone; default 3600) and
    ``COLLIE_APNS_ENVIRONMENT`` (``production`` or ``sandbox``: of an APNs token registered
    without naming one; default production), ``COLLIE_RESEND_INTERVAL`` (seconds between two
    rounds of sending unsettled answers again and, with several workers, of looking for
    pushes a dead worker owed; default 30), ``COLLIE_LEASE_SECONDS`` (with several workers:
    an agent's lease; another worker follows it this long after its holder died; default
    10).

    Raises:
        ConfigError: a value out of its range.
    """
    options: dict[str, Any] = {}
    ttl = environ.get("COLLIE_PUSH_TTL")
    if ttl:
        try:
            options["push_ttl"] = float(ttl)
        except ValueError:
            options["push_ttl"] = -1.0
        if not 0 <= options["push_ttl"] <= 28 * 86400:
            raise ConfigError(f"COLLIE_PUSH_TTL is seconds, 0 to 2419200 (28 days): {ttl!r}")
    for name, field, low, high in (
        ("COLLIE_RESEND_INTERVAL", "resend_interval", 0.1, 3600.0),
        ("COLLIE_LEASE_SECONDS", "lease_seconds", 0.5, 600.0),
    ):
        value = environ.get(name)
        if value:
            options[field] = _seconds(name, value, low, high)
    env = environ.get("COLLIE_APNS_ENVIRONMENT")
    if env:
        if env not in ("production", "sandbox"):
            raise ConfigError(f"COLLIE_APNS_ENVIRONMENT is production or sandbox: {env!r}")
        options["apns_environment"] = env
    return options


def phone_languages(strings: Path | None, lang: str) -> Catalogues:
    """The catalogues: the shipped languages with ``--strings`` applied, ``lang`` the default.

    Raises:
        ValueError: a bad ``--strings`` file, or a ``--lang`` with no catalogue (the message
            names the option).
    """
    found = Catalogues.from_file(strings) if strings else Catalogues.load()
    default = canonical(lang, found.languages)
    if default is None:
        known = ", ".join(found.languages)
        raise ValueError(f"--lang {lang}: no catalogue in that language (known: {known})")
    return Catalogues.from_file(strings, default) if strings else Catalogues.load(default)


def _seconds(name: str, value: str, low: float, high: float) -> float:
    """``value`` of the variable ``name`` as seconds from ``low`` to ``high``.

    Raises:
        ConfigError: not a number in the range.
    """
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not low <= seconds <= high:
        raise ConfigError(f"{name} is seconds, {low:g} to {high:g}: {value!r}")
    return seconds


def _settings(args: argparse.Namespace, sources_path: Path, file: Path = DEFAULT_DB) -> Settings:
    """The settings of ``args``; ``file`` is the SQLite file when nothing names the store
    (on PostgreSQL: where the self-signed certificate is kept beside)."""
    catalogues = phone_languages(args.strings, args.lang)
    redact = redactor_from_env(os.environ).enabled
    db_path, database_url = store_from(args.db, os.environ, file)
    return Settings(
        sources=load_sources(sources_path, beside=db_path.expanduser().absolute().parent),
        crew=load_crew(sources_path),
        crew_answers=getattr(args, "crew_answers", True),
        db_path=db_path,
        database_url=database_url,
        host=args.host,
        port=args.port,
        token=os.environ.get("COLLIE_TOKEN") or None,
        spaces=tuple(args.space),
        machine=getattr(args, "machine", None) or socket.gethostname(),
        catalogues=catalogues,
        redact=redact,
        push_targets=push_targets_from_env(os.environ),
        **push_options_from_env(os.environ),
        unix_path=args.unix,
        auth=args.auth,
        public_urls=tuple(args.public_url),
        # A self-signed certificate is kept beside the SQLite file (on PostgreSQL: collie.db's).
        tls=phones_cli.tls_from_args(argparse.Namespace(**vars(args) | {"db": db_path})),
    )


def _serve(settings: Settings) -> int:
    check_store(settings.db_path, settings.database_url)  # before a line says it serves
    serving.raise_open_files(len(settings.sources) + len(settings.crew))
    app = serving.gateway_app(settings)
    app.on_startup.append(serving.freeze_heap)
    if settings.unix_path is not None:
        # Created 0600 from the start: no moment when another user could connect.
        os.umask(0o177)
        settings.unix_path.unlink(missing_ok=True)
        print(f"collie-gateway: phone API on the Unix socket {settings.unix_path}")
        return serving.serve(app, unix_path=settings.unix_path)  # SIGTERM/SIGINT: README, Stopping
    scheme = "https" if settings.tls is not None else "http"
    print(
        f"collie-gateway: phone API on {scheme}://{settings.host}:{settings.port}/api/v1/dashboard"
    )
    if settings.tls is not None:
        print(f"  TLS certificate SHA-256: {spaced_fingerprint(settings.tls.fingerprint)}")
    tls = settings.tls.server_context() if settings.tls is not None else None
    return serving.serve(app, host=settings.host, port=settings.port, ssl_context=tls)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


AGENTS_READY: Final = 15.0  # ours: seconds the demo waits for its sample agents to listen


def _demo(args: argparse.Namespace) -> int:
    check_args(args)
    phone_languages(args.strings, args.lang)  # a bad file stops the demo before agents start
    state = (args.state_dir or DEMO_STATE).expanduser().absolute()
    # The store: --db, else COLLIE_DATABASE_URL, else the state folder's file (checked, and a
    # bad URL refused, before any agent starts).
    db_path, url = store_from(args.db, os.environ, state / "collie.db")
    if args.fresh:
        for name in DEMO_FILES:
            (state / name).unlink(missing_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    procs, sources, addresses = _start_agents(state)
    try:
        sources_path = state / "sources.json"
        sources_path.write_text(json.dumps(sources, indent=2), encoding="utf-8")
        if not args.space:
            args.space = ["home"]  # a space, so the dashboard shows the section's place (D7)
        settings = _settings(args, sources_path, state / "collie.db")
        _wait_listening(addresses)  # the gateway's first look finds them up
        # flush: the lines show at once also when the output goes to a file or a pipe
        print("\n".join(_demo_lines(settings, state, db_path, url, args.db)), flush=True)
        return _serve(settings)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


def _start_agents(
    state: Path,
) -> tuple[list[subprocess.Popen[bytes]], dict[str, Any], list[str | int]]:
    """Start the sample agents: their processes, the sources.json naming them, and where
    they listen (a socket's path, a loopback port)."""
    pi_port = _free_port()
    agents = {
        "desk": ["--socket", str(state / "desk.sock")],
        "pi-durable": ["--port", str(pi_port)],
        "nohistory": ["--socket", str(state / "nohistory.sock")],
        "wire2": ["--socket", str(state / "wire2.sock"), "--log", str(state / "wire2.log")],
    }
    procs: list[subprocess.Popen[bytes]] = []
    for name, extra in agents.items():
        module = "fixtures.agents." + name.replace("-", "_")
        cmd = [sys.executable, "-m", module, "--state", str(state / f"{name}.db"), *extra]
        procs.append(subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL))
    sockets = [str(state / f"{n}.sock") for n in ("desk", "nohistory", "wire2")]
    sources = {
        "durable_agents": [
            {"name": "desk", "socket": sockets[0]},
            {"name": "pi-durable", "url": f"http://127.0.0.1:{pi_port}"},
            {"name": "nohistory", "socket": sockets[1]},
            {"name": "wire2", "socket": sockets[2]},
        ]
    }
    return procs, sources, [*sockets, pi_port]


def _wait_listening(addresses: Sequence[str | int]) -> None:
    """Return once every address (a Unix socket's path, a loopback port) takes connections,
    or after ``AGENTS_READY`` seconds (the gateway then reports the missing ones)."""
    deadline = time.monotonic() + AGENTS_READY
    waiting = list(addresses)
    while waiting and time.monotonic() < deadline:
        for where in list(waiting):
            family = socket.AF_INET if isinstance(where, int) else socket.AF_UNIX
            with socket.socket(family) as probe:
                try:
                    probe.connect(("127.0.0.1", where) if isinstance(where, int) else where)
                except OSError:
                    continue
            waiting.remove(where)
        time.sleep(0.05 if waiting else 0)


def _demo_lines(
    settings: Settings, state: Path, db_path: Path, url: str | None, db_arg: Path | str | None
) -> list[str]:
    """What the demo prints before it serves: where things are, and how to look."""
    base = f"http://{settings.host}:{settings.port}"
    auth = ' -H "Authorization: Bearer $COLLIE_TOKEN"' if settings.token else ""
    if url is None:
        store, pair = str(db_path.absolute()), f"collie-gateway pair --db {db_path.absolute()}"
    else:
        store = shown_url(url) + (" (COLLIE_DATABASE_URL)" if db_arg is None else "")
        same = "the same COLLIE_DATABASE_URL" if db_arg is None else "--db and the demo's URL"
        pair = f"collie-gateway pair  (with {same})"
    lines = [
        f"collie-gateway demo: agents and files in {state} (kept for the next run; "
        "--fresh starts over)",
        f"  store:      {store}",
        f"  the page:   {base}/  (the web companion, in any browser)",
        f"  dashboard:  curl{auth} {base}/api/v1/dashboard",
        f"  live:       curl -N{auth} {base}/api/v1/events",
        f"  an agent:   curl --unix-socket {state / 'desk.sock'} http://agent/hello",
        '  new asks:   desk\'s starter "Ask me something" raises one of each kind',
        "  wire2:      a sample speaking wire v2 on purpose, to show a version mismatch: "
        "its warning is expected",
        f"  pair:       {pair}  (a phone, or the page)",
    ]
    if not settings.token:
        lines.append(
            "  (once a phone is paired, curl needs a credential too: run the demo with "
            "COLLIE_TOKEN set, and these lines show the header)"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "bridge":
        return _bridge(args)
    if args.command in hooks_cli.COMMANDS:
        return hooks_cli.run(args)
    if args.command in phones_cli.COMMANDS:
        try:
            return phones_cli.run(args)
        except GatewayError as exc:
            print(f"collie-gateway: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        except KeyboardInterrupt:
            print(f"collie-gateway: {phones_cli.stopped(args)}", file=sys.stderr)
            return EXIT_FAILED
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    mask_logs(redactor_from_env(os.environ).mask)
    try:
        if args.command == "serve":
            check_args(args)
            return _serve(_settings(args, args.sources))
        if args.command == "relay":
            return _relay(args)
        return _demo(args)
    except (GatewayError, ValueError) as exc:
        print(f"collie-gateway: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"collie-gateway: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
