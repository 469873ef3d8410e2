"""The schema: one history of numbered steps for both engines, and how a database's version
is read against it.

Each step migrates from version i to i + 1 and is written once, in SQLite's words; the
PostgreSQL engine takes its column types (``engine.postgres_schema``). A step only one
engine takes is in ``ONLY`` (the other counts it and changes nothing). Each engine keeps the
version where it always has (SQLite: ``PRAGMA user_version``; PostgreSQL: the row of
``collie_schema``) and applies each step in one transaction (PostgreSQL's under an advisory
lock, so workers starting together apply each once).

The history is the SQLite file's: a file at any of its versions goes on from there. A
PostgreSQL database kept its own history before (five steps to the same tables): its last
version, 5, is version 8 here (:func:`from_postgres_history`).
"""

from __future__ import annotations

from typing import Final

from collie_gateway.errors import StoreError
from collie_gateway.store.engine import POSTGRESQL, postgres_schema

#: The columns of a once-key's outcome on each device (its push; its withdrawal).
_PER_DEVICE: Final = """(
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (key, device)
    ) WITHOUT ROWID;"""

#: The phones, the pairing codes, and the phone of each answer and each push registration.
PHONES: Final = """
    CREATE TABLE phones (
        phone_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        scope TEXT NOT NULL,
        token_hash TEXT NOT NULL,
        public_key TEXT,
        paired_at TEXT NOT NULL,
        last_seen TEXT,
        last_address TEXT,
        revoked_at TEXT
    );
    CREATE TABLE pairings (
        pairing_id TEXT PRIMARY KEY,
        code_hash TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        state TEXT NOT NULL,
        phone_id TEXT,
        check_number TEXT
    ) WITHOUT ROWID;
    ALTER TABLE answers ADD COLUMN phone TEXT;
    ALTER TABLE devices ADD COLUMN phone TEXT;
    """

#: A tap decided and written in one call (``collie_take``): the ledger's ``take`` (T1) as
#: one statement, under the same named locks as the transaction it replaces; it writes what
#: :func:`~collie_gateway.core.answers.on_tap` decides and returns what that decision reads
#: (the record as it was, or the ask's claim holder), so the caller decides it again, the
#: same, without a second round trip. An append to the shared log in one call
#: (``collie_append``): fenced entries checked against their lease, numbered from the counter
#: row, kept, and announced with a NOTIFY whose payload carries them (``p_body``, the
#: entries' JSON, when every entry was kept and it fits), else the last number only.
_ONE_TRIP: Final = """
    CREATE FUNCTION collie_take(
        p_request TEXT, p_agent TEXT, p_ask TEXT, p_version INTEGER, p_answer BYTEA,
        p_phone TEXT, p_now TEXT,
        OUT o_request TEXT, OUT o_agent TEXT, OUT o_ask TEXT, OUT o_version INTEGER,
        OUT o_answer BYTEA, OUT o_attempts INTEGER, OUT o_settled INTEGER,
        OUT o_outcome TEXT, OUT o_reason TEXT, OUT o_phone TEXT, OUT o_holder TEXT
    ) LANGUAGE plpgsql AS $$
    DECLARE
        rec answers%ROWTYPE;
    BEGIN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            'ask' || chr(31) || p_agent || chr(31) || p_ask, 0));
        PERFORM pg_advisory_xact_lock(hashtextextended('request' || chr(31) || p_request, 0));
        SELECT * INTO rec FROM answers a WHERE a.request_id = p_request FOR UPDATE;
        IF FOUND THEN
            o_request := rec.request_id; o_agent := rec.agent; o_ask := rec.ask_id;
            o_version := rec.version; o_answer := rec.answer; o_attempts := rec.attempts;
            o_settled := rec.settled; o_outcome := rec.outcome; o_reason := rec.reason;
            o_phone := rec.phone;
            IF rec.agent = p_agent AND rec.ask_id = p_ask AND rec.version = p_version
                    AND rec.answer = p_answer AND rec.settled = 0 THEN
                UPDATE answers SET attempts = rec.attempts + 1, updated_at = p_now
                    WHERE request_id = p_request;
            END IF;
            RETURN;
        END IF;
        SELECT c.request_id INTO o_holder FROM claims c
            WHERE c.agent = p_agent AND c.ask_id = p_ask;
        IF o_holder IS NOT NULL AND o_holder <> p_request THEN
            INSERT INTO answers(request_id, agent, ask_id, version, answer, attempts, settled,
                                outcome, reason, phone, created_at, updated_at)
                VALUES (p_request, p_agent, p_ask, p_version, p_answer, 0, 1, 'answered',
                        NULL, p_phone, p_now, p_now);
        ELSE
            INSERT INTO answers(request_id, agent, ask_id, version, answer, attempts, settled,
                                outcome, reason, phone, created_at, updated_at)
                VALUES (p_request, p_agent, p_ask, p_version, p_answer, 1, 0, NULL, NULL,
                        p_phone, p_now, p_now);
            INSERT INTO claims(agent, ask_id, request_id) VALUES (p_agent, p_ask, p_request)
                ON CONFLICT (agent, ask_id) DO NOTHING;
        END IF;
    END $$;

    CREATE FUNCTION collie_append(
        p_types TEXT[], p_datas BYTEA[], p_agents TEXT[], p_epochs BIGINT[],
        p_words BYTEA[], p_body TEXT, p_channel TEXT
    ) RETURNS BIGINT[] LANGUAGE plpgsql AS $$
    DECLARE
        live_pairs TEXT[];
        keep BOOLEAN[];
        kept INTEGER := 0;
        n INTEGER := coalesce(array_length(p_types, 1), 0);
        last BIGINT;
        seqs BIGINT[] := '{}';
        i INTEGER;
    BEGIN
        SELECT coalesce(array_agg(h.agent || chr(31) || h.epoch::text), '{}') INTO live_pairs
            FROM (SELECT l.agent, l.epoch FROM leases l
                  WHERE (l.agent, l.epoch) IN (
                      SELECT * FROM unnest(p_agents, p_epochs) AS f(agent, epoch)
                      WHERE f.agent IS NOT NULL AND f.epoch IS NOT NULL)
                    AND l.expires_at > clock_timestamp()
                  FOR SHARE) h;
        FOR i IN 1 .. n LOOP
            keep[i] := p_agents[i] IS NULL OR p_epochs[i] IS NULL
                OR (p_agents[i] || chr(31) || p_epochs[i]::text) = ANY(live_pairs);
            IF keep[i] THEN kept := kept + 1; END IF;
        END LOOP;
        IF kept = 0 THEN
            RETURN array_fill(NULL::BIGINT, ARRAY[n]);
        END IF;
        UPDATE event_counter SET seq = seq + kept WHERE one = 1 RETURNING seq INTO last;
        last := last - kept;
        FOR i IN 1 .. n LOOP
            IF keep[i] THEN
                last := last + 1;
                INSERT INTO events(seq, type, data, agent, epoch, words)
                    VALUES (last, p_types[i], p_datas[i], p_agents[i], p_epochs[i], p_words[i]);
                seqs := seqs || last;
            ELSE
                seqs := seqs || NULL::BIGINT;
            END IF;
        END LOOP;
        IF kept = n AND p_body IS NOT NULL THEN
            PERFORM pg_notify(p_channel, '[' || (last - kept + 1)::text || ',' || p_body || ']');
        ELSE
            PERFORM pg_notify(p_channel, last::text);
        END IF;
        RETURN seqs;
    END $$;
    """

#: The taps' arrays ``collie_take_many`` and ``collie_ledger_many`` take, one element a tap.
_TAP_ARGS: Final = """p_requests TEXT[], p_agents TEXT[], p_asks TEXT[], p_versions INTEGER[],
        p_answers BYTEA[], p_phones TEXT[], p_nows TEXT[]"""
#: What ``collie_take_many`` returns for each tap: its place, the record as it was, the
#: ask's claim holder.
_TAP_ROWS: Final = """RETURNS TABLE (
        o_i INTEGER, o_request TEXT, o_agent TEXT, o_ask TEXT, o_version INTEGER,
        o_answer BYTEA, o_attempts INTEGER, o_settled INTEGER, o_outcome TEXT,
        o_reason TEXT, o_phone TEXT, o_holder TEXT
    )"""
#: The named locks of a batch of taps, the asks' then the request ids', each in key order.
_TAPS_LOCKED: Final = """FOR k IN
                SELECT DISTINCT hashtextextended('ask' || chr(31) || t.a || chr(31) || t.s, 0)
                FROM unnest(p_agents, p_asks) AS t(a, s) ORDER BY 1 LOOP
                PERFORM pg_advisory_xact_lock(k);
            END LOOP;
            FOR k IN SELECT DISTINCT hashtextextended('request' || chr(31) || t.r, 0)
                     FROM unnest(p_requests) AS t(r) ORDER BY 1 LOOP
                PERFORM pg_advisory_xact_lock(k);
            END LOOP;"""

#: Taps decided and written in one call per batch (``collie_take_many``, store/ledger.py):
#: the taps of one call in the order given, each as ``collie_take`` decides it alone (a
#: later tap sees what an earlier one wrote), one row out per tap (``o_i``, its place). Every
#: named lock is taken first, the asks' then the request ids', each in the order of their
#: keys, then the records already kept, in the order of their ids (a lone tap's: its own):
#: two batches (or a batch and a settlement) never wait on each other in a circle.
#: Settlements in one call per batch (``collie_settle_many``): their records held in the
#: same order, then each written in the order given, as one alone (an update of the
#: unsettled record; its claim released when ``p_release`` says so). Each statement in them
#: reads one row by its key, so its plan (made once per connection, maybe while the tables
#: are empty) is an index's. Both in one call (``collie_ledger_many``): the settlements, then
#: the taps; when there are both, every lock of the two first, in the same order.
_BATCHED: Final = (
    """
    CREATE FUNCTION collie_take_many(
        """
    + _TAP_ARGS
    + """
    ) """
    + _TAP_ROWS
    + """ LANGUAGE plpgsql AS $$
    DECLARE
        n INTEGER := coalesce(array_length(p_requests, 1), 0);
        k BIGINT;
        r TEXT;
        rec answers%ROWTYPE;
    BEGIN
        IF n = 1 THEN  -- a lone tap: its two locks, as collie_take takes them
            PERFORM pg_advisory_xact_lock(hashtextextended(
                'ask' || chr(31) || p_agents[1] || chr(31) || p_asks[1], 0));
            PERFORM pg_advisory_xact_lock(hashtextextended(
                'request' || chr(31) || p_requests[1], 0));
        ELSE
            """
    + _TAPS_LOCKED
    + """
            FOR r IN SELECT DISTINCT t.r FROM unnest(p_requests) AS t(r) ORDER BY 1 LOOP
                PERFORM 1 FROM answers a WHERE a.request_id = r FOR UPDATE;
            END LOOP;
        END IF;
        FOR i IN 1 .. n LOOP
            o_i := i;
            o_request := NULL; o_agent := NULL; o_ask := NULL; o_version := NULL;
            o_answer := NULL; o_attempts := NULL; o_settled := NULL; o_outcome := NULL;
            o_reason := NULL; o_phone := NULL; o_holder := NULL;
            SELECT * INTO rec FROM answers a WHERE a.request_id = p_requests[i] FOR UPDATE;
            IF FOUND THEN
                o_request := rec.request_id; o_agent := rec.agent; o_ask := rec.ask_id;
                o_version := rec.version; o_answer := rec.answer; o_attempts := rec.attempts;
                o_settled := rec.settled; o_outcome := rec.outcome; o_reason := rec.reason;
                o_phone := rec.phone;
                IF rec.agent = p_agents[i] AND rec.ask_id = p_asks[i]
                        AND rec.version = p_versions[i] AND rec.answer = p_answers[i]
                        AND rec.settled = 0 THEN
                    UPDATE answers SET attempts = rec.attempts + 1, updated_at = p_nows[i]
                        WHERE request_id = p_requests[i];
                END IF;
                RETURN NEXT;
                CONTINUE;
            END IF;
            SELECT c.request_id INTO o_holder FROM claims c
                WHERE c.agent = p_agents[i] AND c.ask_id = p_asks[i];
            IF o_holder IS NOT NULL AND o_holder <> p_requests[i] THEN
                INSERT INTO answers(request_id, agent, ask_id, version, answer, attempts,
                                    settled, outcome, reason, phone, created_at, updated_at)
                    VALUES (p_requests[i], p_agents[i], p_asks[i], p_versions[i],
                            p_answers[i], 0, 1, 'answered', NULL, p_phones[i], p_nows[i],
                            p_nows[i]);
            ELSE
                INSERT INTO answers(request_id, agent, ask_id, version, answer, attempts,
                                    settled, outcome, reason, phone, created_at, updated_at)
                    VALUES (p_requests[i], p_agents[i], p_asks[i], p_versions[i],
                            p_answers[i], 1, 0, NULL, NULL, p_phones[i], p_nows[i], p_nows[i]);
                INSERT INTO claims(agent, ask_id, request_id)
                    VALUES (p_agents[i], p_asks[i], p_requests[i])
                    ON CONFLICT (agent, ask_id) DO NOTHING;
            END IF;
            RETURN NEXT;
        END LOOP;
    END $$;

    CREATE FUNCTION collie_settle_many(
        p_attempts INTEGER[], p_settled INTEGER[], p_outcomes TEXT[], p_reasons TEXT[],
        p_nows TEXT[], p_requests TEXT[], p_release BOOLEAN[], p_agents TEXT[], p_asks TEXT[]
    ) RETURNS VOID LANGUAGE plpgsql AS $$
    DECLARE
        n INTEGER := coalesce(array_length(p_requests, 1), 0);
        r TEXT;
    BEGIN
        IF n > 1 THEN  -- a lone settlement's update holds its row
            FOR r IN SELECT DISTINCT t.r FROM unnest(p_requests) AS t(r) ORDER BY 1 LOOP
                PERFORM 1 FROM answers a WHERE a.request_id = r FOR UPDATE;
            END LOOP;
        END IF;
        FOR i IN 1 .. n LOOP
            UPDATE answers SET attempts = p_attempts[i], settled = p_settled[i],
                    outcome = p_outcomes[i], reason = p_reasons[i], updated_at = p_nows[i]
                WHERE request_id = p_requests[i] AND settled = 0;
            IF p_release[i] THEN
                DELETE FROM claims WHERE agent = p_agents[i] AND ask_id = p_asks[i]
                    AND request_id = p_requests[i];
            END IF;
        END LOOP;
    END $$;

    CREATE FUNCTION collie_ledger_many(
        s_attempts INTEGER[], s_settled INTEGER[], s_outcomes TEXT[], s_reasons TEXT[],
        s_nows TEXT[], s_requests TEXT[], s_release BOOLEAN[], s_agents TEXT[], s_asks TEXT[],
        """
    + _TAP_ARGS
    + """
    ) """
    + _TAP_ROWS
    + """ LANGUAGE plpgsql AS $$
    DECLARE
        k BIGINT;
        r TEXT;
    BEGIN
        IF coalesce(array_length(s_requests, 1), 0) > 0
                AND coalesce(array_length(p_requests, 1), 0) > 0 THEN
            """
    + _TAPS_LOCKED
    + """
            FOR r IN SELECT DISTINCT t.r FROM unnest(s_requests || p_requests) AS t(r)
                     ORDER BY 1 LOOP
                PERFORM 1 FROM answers a WHERE a.request_id = r FOR UPDATE;
            END LOOP;
        END IF;
        PERFORM collie_settle_many(s_attempts, s_settled, s_outcomes, s_reasons, s_nows,
                                   s_requests, s_release, s_agents, s_asks);
        RETURN QUERY SELECT * FROM collie_take_many(p_requests, p_agents, p_asks, p_versions,
                                                    p_answers, p_phones, p_nows);
    END $$;
    """
)

DELTAS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        hello BLOB,
        wire INTEGER,
        last_event_id TEXT
    );
    CREATE TABLE conversations (
        agent TEXT NOT NULL,
        id TEXT NOT NULL,
        body BLOB NOT NULL,
        PRIMARY KEY (agent, id)
    ) WITHOUT ROWID;
    """,
    """
    CREATE TABLE answers (
        request_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        ask_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        answer BLOB NOT NULL,
        attempts INTEGER NOT NULL,
        settled INTEGER NOT NULL,
        outcome TEXT,
        reason TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX answers_pending ON answers(agent) WHERE settled = 0;
    CREATE INDEX answers_ask ON answers(agent, ask_id);
    CREATE TABLE claims (
        agent TEXT NOT NULL,
        ask_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        PRIMARY KEY (agent, ask_id)
    ) WITHOUT ROWID;
    CREATE TABLE notes (
        agent TEXT NOT NULL,
        conversation TEXT NOT NULL,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        at TEXT NOT NULL,
        after_item TEXT,
        PRIMARY KEY (agent, conversation, key)
    ) WITHOUT ROWID;
    """,
    """
    CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
    CREATE TABLE devices (
        id TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        token TEXT NOT NULL,
        environment TEXT NOT NULL,
        key BLOB,
        registered_at REAL NOT NULL,
        UNIQUE (provider, token)
    ) WITHOUT ROWID;
    CREATE TABLE push_once (key TEXT PRIMARY KEY NOT NULL, at REAL NOT NULL) WITHOUT ROWID;
    CREATE TABLE push_log (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        agent TEXT,
        conversation TEXT,
        ask TEXT,
        device TEXT,
        outcome TEXT NOT NULL,
        reason TEXT,
        provider_id TEXT
    );
    """,
    # P3: an ask is pushed once it is delivered, not once it is tried. ``state`` is
    # 'owed' (decided, not yet delivered to every device) or 'done' (delivered, or a lasting
    # decision not to push: ``reason``); rows from before are done.
    """
    ALTER TABLE push_once ADD COLUMN state TEXT NOT NULL DEFAULT 'done';
    ALTER TABLE push_once ADD COLUMN reason TEXT;
    CREATE TABLE push_delivered """
    + _PER_DEVICE
    + """
    """,
    # The language a phone registered its pushes in (a language tag; NULL: the default).
    """
    ALTER TABLE devices ADD COLUMN lang TEXT;
    """,
    PHONES,
    # Web Push devices (their subscription's keys); each ask push's withdrawal (``note``,
    # JSON) and which devices were sent it (once per device); webhooks owed across a stop.
    """
    ALTER TABLE devices ADD COLUMN p256dh BLOB;
    ALTER TABLE devices ADD COLUMN auth BLOB;
    ALTER TABLE push_once ADD COLUMN note BLOB;
    CREATE TABLE push_withdrawn """
    + _PER_DEVICE
    + """
    CREATE TABLE webhooks_owed (
        id TEXT NOT NULL,
        url TEXT NOT NULL,
        body BLOB NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (id, url)
    ) WITHOUT ROWID;
    """,  # The shared store's own tables (several workers on PostgreSQL; nothing on SQLite, see
    # ``ONLY``): each agent's lease (store/pg/leases.py: its holder, its epoch, the fencing
    # token, and its expiry on the database's clock); the phones' events in one sequence
    # (store/pg/events.py: numbered from a counter row in the writing transaction, so sequence
    # order is commit order; an entry written for an agent's link names the agent and the
    # epoch it was written under, and carries its words in each language); the store's id,
    # which starts every phone's event id; the order phones were kept in (SQLite's rowid).
    """
    CREATE TABLE leases (
        agent TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE event_counter (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
    INSERT INTO event_counter(one, seq) VALUES (1, 0);
    CREATE TABLE events (
        seq BIGINT PRIMARY KEY,
        type TEXT NOT NULL,
        data BYTEA NOT NULL,
        agent TEXT,
        epoch BIGINT,
        words BYTEA
    );
    INSERT INTO kv(key, value)
        VALUES ('store_id',
                convert_to(substr(md5(random()::text || clock_timestamp()), 1, 12), 'UTF8'))
        ON CONFLICT (key) DO NOTHING;
    ALTER TABLE phones ADD COLUMN n BIGSERIAL;
    """,
    # The shared store's one-round-trip transactions (PostgreSQL only, see ``ONLY``): a
    # tap's decision (store/ledger.py) and an append to the shared log (store/pg/events.py).
    _ONE_TRIP,
    # Taps in batches (PostgreSQL only): the ledger's group commit (store/ledger.py).
    _BATCHED,
)

#: Steps only one engine takes, by index.
ONLY: Final[dict[int, str]] = {7: POSTGRESQL, 8: POSTGRESQL, 9: POSTGRESQL}
LATEST: Final = len(DELTAS)
#: The last version of PostgreSQL's history before this one, and its version here.
POSTGRES_HISTORY_LAST: Final = 5
POSTGRES_HISTORY_HERE: Final = 8


def step(engine: str, version: int) -> str:
    """The script of the step from ``version`` to ``version + 1`` on ``engine`` (empty when
    the step is another engine's)."""
    only = ONLY.get(version)
    if only is not None and only != engine:
        return ""
    text = DELTAS[version]
    return postgres_schema(text) if engine == POSTGRESQL else text


def refuse_newer(where: str, version: int, unchanged: str) -> None:
    """Raise StoreError when ``version`` is newer than this gateway's schema.

    Raises:
        StoreError: one line naming the store (``where``) and saying it is ``unchanged``.
    """
    if version > LATEST:
        raise StoreError(
            f"{where}: schema version {version} is newer than this gateway knows "
            f"({LATEST}); update the gateway ({unchanged})"
        )


def from_postgres_history(where: str, version: int) -> int:
    """The version here of a PostgreSQL database kept by the history before this one.

    Raises:
        StoreError: a version of that history before its last (no gateway left it there).
    """
    if version != POSTGRES_HISTORY_LAST:
        raise StoreError(
            f"{where}: schema version {version} of an older gateway's PostgreSQL history;"
            " open it with that gateway first (the database was not changed)"
        )
    return POSTGRES_HISTORY_HERE
