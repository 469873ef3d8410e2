-- The SQLite file's schema as the gateway left it before one store (its last version, 7):
-- each table and index as sqlite_master kept it.
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
    , phone TEXT) WITHOUT ROWID;
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
CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE devices (
        id TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        token TEXT NOT NULL,
        environment TEXT NOT NULL,
        key BLOB,
        registered_at REAL NOT NULL, lang TEXT, phone TEXT, p256dh BLOB, auth BLOB,
        UNIQUE (provider, token)
    ) WITHOUT ROWID;
CREATE TABLE push_once (key TEXT PRIMARY KEY NOT NULL, at REAL NOT NULL, state TEXT NOT NULL DEFAULT 'done', reason TEXT, note BLOB) WITHOUT ROWID;
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
CREATE TABLE push_delivered (
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (key, device)
    ) WITHOUT ROWID;
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
CREATE TABLE push_withdrawn (
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (key, device)
    ) WITHOUT ROWID;
CREATE TABLE webhooks_owed (
        id TEXT NOT NULL,
        url TEXT NOT NULL,
        body BLOB NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (id, url)
    ) WITHOUT ROWID;
PRAGMA user_version=7;
