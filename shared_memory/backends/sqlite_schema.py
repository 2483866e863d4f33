"""The SQLite schema, as ordered migrations, and the lineage prefetch query."""

from __future__ import annotations

from .sql import RECORD_COLS

# Ordered; index + 1 is the schema version stored in PRAGMA user_version. Append, never edit.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE records (
        id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        author TEXT NOT NULL,
        value TEXT NOT NULL,
        parents TEXT NOT NULL,
        supersedes TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX records_key ON records (key);
    CREATE INDEX records_supersedes ON records (supersedes) WHERE supersedes IS NOT NULL;
    CREATE TABLE edges (
        child TEXT NOT NULL,
        parent TEXT NOT NULL,
        PRIMARY KEY (child, parent)
    ) WITHOUT ROWID;
    CREATE TABLE keys (
        key TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        head TEXT,
        version INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        head TEXT,
        previous TEXT,
        owner TEXT NOT NULL,
        by TEXT NOT NULL,
        at TEXT NOT NULL
    );
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        source TEXT NOT NULL,
        agent TEXT,
        tool TEXT,
        plan TEXT,
        verdict TEXT NOT NULL,
        reason TEXT NOT NULL,
        payload TEXT NOT NULL
    );
    CREATE INDEX decisions_tool ON decisions (tool);
    CREATE INDEX decisions_plan ON decisions (plan);
    """,
    # 2: the decision log becomes the audit journal; its gate columns become indexed labels.
    """
    CREATE TABLE journal (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT,
        verdict TEXT NOT NULL,
        labels TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX journal_subject ON journal (subject);
    CREATE TABLE journal_labels (
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        entry INTEGER NOT NULL,
        PRIMARY KEY (name, value, entry)
    ) WITHOUT ROWID;
    INSERT INTO journal (id, at, kind, subject, verdict, labels, detail)
        SELECT id, at, source, plan, verdict,
            json_patch('{}', json_object('agent', agent, 'reason', NULLIF(reason, ''),
                'tool', tool)),
            payload
        FROM decisions ORDER BY id;
    INSERT INTO journal_labels (name, value, entry)
        SELECT 'agent', agent, id FROM decisions WHERE agent IS NOT NULL
        UNION ALL SELECT 'reason', reason, id FROM decisions WHERE reason != ''
        UNION ALL SELECT 'tool', tool, id FROM decisions WHERE tool IS NOT NULL;
    DROP TABLE decisions;
    """,
    # 3: owner epochs and signed heads. A key's epoch counts its owners, so stores written before
    # epochs get the count of owner changes their feed holds (an index serves that, and any
    # per-key history read).
    """
    ALTER TABLE keys ADD COLUMN epoch INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE keys ADD COLUMN head_sig TEXT;
    ALTER TABLE changes ADD COLUMN epoch INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE changes ADD COLUMN sig TEXT;
    CREATE INDEX changes_key ON changes (key, seq);
    UPDATE changes SET epoch = (
        SELECT count(*) FROM changes o
        WHERE o.key = changes.key AND o.kind = 'owner' AND o.seq <= changes.seq
    );
    UPDATE changes SET epoch = 1 WHERE epoch < 1;
    UPDATE keys SET epoch = max(1, (
        SELECT count(*) FROM changes c WHERE c.key = keys.key AND c.kind = 'owner'
    ));
    """,
    # 4: short head leases; `expires` is in Unix seconds (every process of a SQLite
    # store shares the machine's clock).
    """
    CREATE TABLE leases (
        key TEXT NOT NULL,
        lease TEXT NOT NULL,
        holder TEXT NOT NULL,
        kind TEXT NOT NULL,
        expires REAL NOT NULL,
        PRIMARY KEY (key, lease)
    ) WITHOUT ROWID;
    """,
    # 5: signed ownership claims. Who handed each key to its current owner, and that agent's
    # signature; owner changes keep theirs in the feed's `sig`. Stores written before have none
    # (a gate that verifies owners blocks their keys until they are signed again).
    """
    ALTER TABLE keys ADD COLUMN owner_from TEXT;
    ALTER TABLE keys ADD COLUMN owner_sig TEXT;
    """,
    # 6: an entry's verdict becomes a label like any other (`verdict`), indexed with the rest,
    # and its column goes. The table is rebuilt (what SQLite before 3.35 needs to drop a
    # column), ids kept, and its id sequence with them.
    """
    CREATE TABLE journal_moved (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT,
        labels TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    INSERT INTO journal_moved (id, at, kind, subject, labels, detail)
        SELECT id, at, kind, subject,
            CASE WHEN verdict = '' THEN labels ELSE json_set(labels, '$.verdict', verdict) END,
            detail
        FROM journal ORDER BY id;
    DELETE FROM journal_labels
        WHERE name = 'verdict' AND entry IN (SELECT id FROM journal WHERE verdict != '');
    INSERT INTO journal_labels (name, value, entry)
        SELECT 'verdict', verdict, id FROM journal WHERE verdict != '';
    UPDATE sqlite_sequence
        SET seq = max(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'journal'), 0))
        WHERE name = 'journal_moved';
    DROP TABLE journal;
    ALTER TABLE journal_moved RENAME TO journal;
    CREATE INDEX journal_subject ON journal (subject);
    """,
)

_PREFETCH_SQL = f"""
    WITH RECURSIVE walk(id) AS (
        SELECT value FROM json_each(?1)
        UNION
        SELECT e.parent FROM walk w
        JOIN records r ON r.id = w.id
        JOIN edges e ON e.child = w.id
        WHERE r.key NOT IN (SELECT value FROM json_each(?2))
    )
    SELECT {RECORD_COLS} FROM records WHERE id IN (SELECT id FROM walk LIMIT ?3)
"""
