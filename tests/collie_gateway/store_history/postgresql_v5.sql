-- The PostgreSQL database's schema as the gateway left it before one store: its own
-- history's five steps (store/pg/database.py then), and its version row at 5.
-- step 1
    CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        hello BYTEA,
        wire INTEGER,
        last_event_id TEXT
    );
    CREATE TABLE conversations (
        agent TEXT NOT NULL,
        id TEXT NOT NULL,
        body BYTEA NOT NULL,
        PRIMARY KEY (agent, id)
    );
    CREATE TABLE answers (
        request_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        ask_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        answer BYTEA NOT NULL,
        attempts INTEGER NOT NULL,
        settled INTEGER NOT NULL,
        outcome TEXT,
        reason TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX answers_pending ON answers(agent) WHERE settled = 0;
    CREATE INDEX answers_ask ON answers(agent, ask_id);
    CREATE TABLE claims (
        agent TEXT NOT NULL,
        ask_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        PRIMARY KEY (agent, ask_id)
    );
    CREATE TABLE notes (
        agent TEXT NOT NULL,
        conversation TEXT NOT NULL,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        at TEXT NOT NULL,
        after_item TEXT,
        PRIMARY KEY (agent, conversation, key)
    );
    CREATE TABLE kv (key TEXT PRIMARY KEY, value BYTEA NOT NULL);
    CREATE TABLE devices (
        id TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        token TEXT NOT NULL,
        environment TEXT NOT NULL,
        key BYTEA,
        registered_at DOUBLE PRECISION NOT NULL,
        UNIQUE (provider, token)
    );
    CREATE TABLE push_once (
        key TEXT PRIMARY KEY,
        at DOUBLE PRECISION NOT NULL,
        state TEXT NOT NULL DEFAULT 'done',
        reason TEXT
    );
    CREATE TABLE push_log (
        id BIGSERIAL PRIMARY KEY,
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
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (key, device)
    );
    
-- step 2
    CREATE TABLE leases (
        agent TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    
-- step 3
    CREATE TABLE event_counter (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL);
    INSERT INTO event_counter(one, seq) VALUES (1, 0);
    CREATE TABLE events (
        seq BIGINT PRIMARY KEY,
        type TEXT NOT NULL,
        data BYTEA NOT NULL
    );
    
-- step 4
    ALTER TABLE devices ADD COLUMN lang TEXT;
    ALTER TABLE devices ADD COLUMN phone TEXT;
    ALTER TABLE devices ADD COLUMN p256dh BYTEA;
    ALTER TABLE devices ADD COLUMN auth BYTEA;
    ALTER TABLE answers ADD COLUMN phone TEXT;
    ALTER TABLE push_once ADD COLUMN note BYTEA;
    CREATE TABLE phones (
        phone_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        scope TEXT NOT NULL,
        token_hash TEXT NOT NULL,
        public_key TEXT,
        paired_at TEXT NOT NULL,
        last_seen TEXT,
        last_address TEXT,
        revoked_at TEXT,
        n BIGSERIAL  -- the order phones were kept in (SQLite's rowid)
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
    );
    CREATE TABLE push_withdrawn (
        key TEXT NOT NULL,
        device TEXT NOT NULL,
        outcome TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (key, device)
    );
    CREATE TABLE webhooks_owed (
        id TEXT NOT NULL,
        url TEXT NOT NULL,
        body BYTEA NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (id, url)
    );
    
-- step 5
    ALTER TABLE events ADD COLUMN agent TEXT;
    ALTER TABLE events ADD COLUMN epoch BIGINT;
    ALTER TABLE events ADD COLUMN words BYTEA;
    INSERT INTO kv(key, value)
        VALUES ('store_id',
                convert_to(substr(md5(random()::text || clock_timestamp()), 1, 12), 'UTF8'))
        ON CONFLICT (key) DO NOTHING;
    
CREATE TABLE collie_schema (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    version INTEGER NOT NULL
);
INSERT INTO collie_schema(one, version) VALUES (1, 5);
