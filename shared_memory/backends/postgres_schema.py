"""The PostgreSQL schema, as ordered migrations, and the statements the store reuses."""

from __future__ import annotations

from .sql import RECORD_COLS

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS pf_records (
        id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        author TEXT NOT NULL,
        value TEXT NOT NULL,
        parents TEXT[] NOT NULL,
        supersedes TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS pf_records_key ON pf_records (key);
    CREATE INDEX IF NOT EXISTS pf_records_supersedes ON pf_records (supersedes)
        WHERE supersedes IS NOT NULL;
    CREATE TABLE IF NOT EXISTS pf_keys (
        key TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        head TEXT,
        version BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE IF NOT EXISTS pf_changes (
        seq BIGSERIAL PRIMARY KEY,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        head TEXT,
        previous TEXT,
        owner TEXT NOT NULL,
        by TEXT NOT NULL,
        at TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS pf_decisions (
        id BIGSERIAL PRIMARY KEY,
        at TEXT NOT NULL,
        source TEXT NOT NULL,
        agent TEXT,
        tool TEXT,
        plan TEXT,
        verdict TEXT NOT NULL,
        reason TEXT NOT NULL,
        payload TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS pf_decisions_tool ON pf_decisions (tool);
    CREATE INDEX IF NOT EXISTS pf_decisions_plan ON pf_decisions (plan);
    """,
    # 2: the decision log becomes the audit journal; its gate columns become indexed labels.
    """
    CREATE TABLE pf_journal (
        id BIGSERIAL PRIMARY KEY,
        at TEXT NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT,
        verdict TEXT NOT NULL,
        labels TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX pf_journal_subject ON pf_journal (subject);
    CREATE TABLE pf_journal_labels (
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        entry BIGINT NOT NULL,
        PRIMARY KEY (name, value, entry)
    );
    INSERT INTO pf_journal (id, at, kind, subject, verdict, labels, detail)
        SELECT id, at, source, plan, verdict,
            jsonb_strip_nulls(jsonb_build_object(
                'agent', agent, 'reason', NULLIF(reason, ''), 'tool', tool))::text,
            payload
        FROM pf_decisions ORDER BY id;
    INSERT INTO pf_journal_labels (entry, name, value)
        SELECT id, 'agent', agent FROM pf_decisions WHERE agent IS NOT NULL
        UNION ALL SELECT id, 'reason', reason FROM pf_decisions WHERE reason <> ''
        UNION ALL SELECT id, 'tool', tool FROM pf_decisions WHERE tool IS NOT NULL;
    SELECT setval(pg_get_serial_sequence('pf_journal', 'id'),
        COALESCE((SELECT max(id) FROM pf_journal), 0) + 1, false);
    DROP TABLE pf_decisions;
    """,
    # 3: owner epochs and signed heads. A key's epoch counts its owners, so stores written before
    # epochs get the count of owner changes their feed holds (an index serves that, and any
    # per-key history read).
    """
    ALTER TABLE pf_keys ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;
    ALTER TABLE pf_keys ADD COLUMN head_sig TEXT;
    ALTER TABLE pf_changes ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;
    ALTER TABLE pf_changes ADD COLUMN sig TEXT;
    CREATE INDEX pf_changes_key ON pf_changes (key, seq);
    UPDATE pf_changes c SET epoch = GREATEST(1, n.epoch) FROM (
        SELECT seq, count(*) FILTER (WHERE kind = 'owner')
            OVER (PARTITION BY key ORDER BY seq) AS epoch
        FROM pf_changes
    ) n WHERE n.seq = c.seq;
    UPDATE pf_keys k SET epoch = GREATEST(1, (
        SELECT count(*) FROM pf_changes c WHERE c.key = k.key AND c.kind = 'owner'
    ));
    """,
    # 4: short head leases; `expires` is in Unix seconds on the server's clock, so
    # processes on machines whose clocks differ agree on when a lease ends.
    """
    CREATE TABLE pf_leases (
        key TEXT NOT NULL,
        lease TEXT NOT NULL,
        holder TEXT NOT NULL,
        kind TEXT NOT NULL,
        expires DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (key, lease)
    );
    """,
    # 5: signed ownership claims. Who handed each key to its current owner, and that agent's
    # signature; owner changes keep theirs in the feed's `sig`. Stores written before have none
    # (a gate that verifies owners blocks their keys until they are signed again).
    """
    ALTER TABLE pf_keys ADD COLUMN owner_from TEXT;
    ALTER TABLE pf_keys ADD COLUMN owner_sig TEXT;
    """,
    # 6: an entry's verdict becomes a label like any other (`verdict`), indexed with the rest,
    # and its column goes.
    """
    UPDATE pf_journal SET labels = (labels::jsonb || jsonb_build_object('verdict', verdict))::text
        WHERE verdict <> '';
    DELETE FROM pf_journal_labels l USING pf_journal j
        WHERE l.name = 'verdict' AND l.entry = j.id AND j.verdict <> '';
    INSERT INTO pf_journal_labels (entry, name, value)
        SELECT id, 'verdict', verdict FROM pf_journal WHERE verdict <> '';
    ALTER TABLE pf_journal DROP COLUMN verdict;
    """,
)

# The server's clock, and the stored leases of some keys (one row with NULLs when none).
_LEASES_SQL = """
    SELECT extract(epoch FROM clock_timestamp())::float8, l.key, l.lease, l.holder, l.kind,
        l.expires
    FROM (SELECT 1) AS one LEFT JOIN pf_leases l ON l.key = ANY(%s)
"""

_APPEND_SQL = """
    WITH e AS (
        INSERT INTO pf_journal (at, kind, subject, labels, detail)
        VALUES (%s, %s, %s, %s, %s) RETURNING id
    ), l AS (
        INSERT INTO pf_journal_labels (entry, name, value)
        SELECT e.id, t.name, t.value FROM e, unnest(%s::text[], %s::text[]) AS t(name, value)
    )
    SELECT id FROM e
"""
_PREFETCH_SQL = f"""
    WITH RECURSIVE walk(id) AS (
        SELECT unnest(%s::text[])
        UNION
        -- A scalar subquery per walked id: always one primary-key probe. As a join, the
        -- planner chose a scan of the whole table at every level of the walk.
        SELECT unnest((
            SELECT r.parents FROM pf_records r
            WHERE r.id = w.id AND NOT (r.key = ANY(%s::text[]))
        )) FROM walk w
    )
    SELECT {RECORD_COLS} FROM pf_records
    WHERE id IN (SELECT id FROM walk LIMIT %s)
"""
