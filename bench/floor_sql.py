"""The SQL of the floor: each hot operation's effect in one statement on turnkeeper's schema.

Written for the benchmark (`bench.floor` runs them), independent of the service's code:
each statement reads the facts the service reads (thread, channel and space; grants;
the idempotency key; the rate bucket; the operator; the active run; the follow-ups),
decides in SQL, and writes what the service writes (rows, ``version`` and
``trigger_state`` as the service leaves them, and the same events with the same
payloads, numbered from the writer's transaction id as ``AppendEvents`` numbers them).

Each statement covers the path the benchmark drives and declines every other one: it
then writes nothing and answers ``not_handled`` (a done thread's reopen line,
follow-ups, mentions, restricted messages, denied invocations, deleted follow-ups).
So a floor is never faster for skipping work its path needs, and the benchmark fails
loudly when it is asked for a path it does not implement.

Levels are numbers here: 1 read, 2 write, 3 trigger (``turnkeeper.domain.world.Level``).
"""

from __future__ import annotations

#: Sequence of the events of the floors without any ordering rule (below zero: no reader
#: of the log looks there, and the log's seqs stay untouched).
FLOOR_EVENT_SEQUENCE = "bench_floor_event_seq"

CREATE_FLOOR_EVENT_SEQUENCE = (
    f"CREATE SEQUENCE IF NOT EXISTS {FLOOR_EVENT_SEQUENCE} "
    "INCREMENT BY -1 MAXVALUE -1 START WITH -1"
)


def level_of(principal: str, space: str, channel: str) -> str:
    """The highest grant level of a principal on a space or one of its channels."""
    return (
        "(SELECT coalesce(max(CASE g.level WHEN 'read' THEN 1 WHEN 'write' THEN 2 "
        "WHEN 'trigger' THEN 3 END), 0) FROM grants g "
        f"WHERE g.principal_id = {principal} "
        f"AND ((g.resource_kind = 'space' AND g.resource_id = {space}) "
        f"OR (g.resource_kind = 'channel' AND g.resource_id = {channel})))"
    )


def rfc3339(at: str) -> str:
    """A timestamptz as `turnkeeper.application.documents.rfc3339` writes it."""
    return (
        f"(to_char({at} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') "
        f"|| CASE WHEN mod(extract(microseconds FROM {at})::bigint, 1000000) = 0 THEN '' "
        f"ELSE to_char({at} AT TIME ZONE 'UTC', '.US') END || 'Z')"
    )


def message_doc(m: str, author_id: str, author_kind: str, author_handle: str) -> str:
    """`turnkeeper.application.documents.message_document` of a messages row."""
    return (
        "jsonb_strip_nulls(jsonb_build_object("
        f"'id', {m}.id, 'thread_id', {m}.thread_id, 'thread_seq', {m}.thread_seq, "
        f"'author', jsonb_build_object('id', {author_id}, 'kind', {author_kind}, "
        f"'handle', {author_handle}), "
        f"'origin', {m}.origin, 'kind', {m}.kind, 'content', {m}.content, "
        f"'mentions', to_jsonb({m}.mentions::text[]), 'reply_to_id', {m}.reply_to_id, "
        f"'restricted_to', to_jsonb({m}.restricted_to::text[]), "
        f"'client_msg_id', {m}.client_msg_id, 'created_at', {rfc3339(m + '.created_at')}, "
        f"'trigger_state', {m}.trigger_state, 'trigger_state_reason', {m}.trigger_state_reason, "
        f"'run_id', {m}.run_id, 'version', {m}.version))"
    )


#: The refill of TakeBucketToken (sql/queries/ratelimit.sql), same float8 operations.
_REFILL = (
    "least(%(burst)s::float8, b.tokens + (greatest(0.0::float8, "
    "extract(epoch FROM EXCLUDED.updated_at - b.updated_at)::float8) "
    "* %(per_minute)s::float8) / %(seconds_per_minute)s::float8)"
)


#: The paths of createMessage that append (and so take a token).
APPENDING_PATHS = "path IN ('plain', 'run')"


def take_token(condition: str) -> str:
    """A CTE ``token``: one rl.message token, only when `condition` holds for decision.

    Unlike TakeBucketToken a short bucket is not written at all (the service writes it
    and rolls the unit back): no row comes back, and nothing after it is written.
    """
    return (
        "token AS (\n"
        "    INSERT INTO rate_buckets AS b (principal_id, limit_class, tokens, updated_at)\n"
        "    SELECT %(author_id)s, %(limit_class)s, %(burst)s::float8 - 1.0::float8, %(now)s\n"
        f"    FROM decision WHERE {condition}\n"
        "    ON CONFLICT (principal_id, limit_class) DO UPDATE\n"
        f"    SET tokens = greatest(0.0::float8, {_REFILL} - 1.0::float8),\n"
        "        updated_at = EXCLUDED.updated_at\n"
        f"    WHERE {_REFILL} >= 1.0::float8 - %(tolerance)s::float8\n"
        "    RETURNING b.tokens\n"
        ")"
    )


def append_events(space: str, channel: str, thread: str, source: str, where: str = "") -> str:
    """CTEs ``numbered`` and ``appended`` after a CTE ``new_events``.

    ``new_events`` has (grp, sub) for the order, then type, actor_id, actor_kind,
    resource_kind, resource_id, resource_version, audience_id, restricted_to, payload;
    `space`, `channel` and `thread` are expressions over `source` (a FROM item), which
    `where` may tie to each event ``e``.
    The seqs derive from the writer's transaction id (``turnkeeper_event_seq_base``,
    ADR 0020), as AppendEvents numbers them: no row is shared with other writers.
    """
    return (
        "numbered AS (\n"
        "    SELECT row_number() OVER (ORDER BY grp, sub, resource_id) AS ord, *\n"
        "    FROM new_events\n"
        "),\n"
        "appended AS (\n"
        "    INSERT INTO events (seq, type, actor_id, actor_kind, space_id, channel_id,\n"
        "                        thread_id, resource_kind, resource_id, resource_version,\n"
        "                        audience_id, restricted_to, payload, created_at)\n"
        "    SELECT turnkeeper_event_seq_base() + e.ord, e.type, e.actor_id,\n"
        f"           e.actor_kind, {space}, {channel}, {thread}, e.resource_kind,\n"
        "           e.resource_id, e.resource_version, e.audience_id, e.restricted_to,\n"
        "           e.payload, %(now)s\n"
        f"    FROM numbered e, {source}\n"
        f"{'    WHERE ' + where + chr(10) if where else ''}"
        "    RETURNING seq\n"
        ")"
    )


# -- the four floor rows of the table -------------------------------------------------------

_APPEND_THREAD = (
    "UPDATE threads SET latest_seq = latest_seq + 1 WHERE id = %(thread_id)s RETURNING latest_seq"
)
_APPEND_MESSAGE_COLUMNS = (
    "id, thread_id, thread_seq, author_id, origin, kind, content, mentions, "
    "client_msg_id, digest, created_at, version"
)
_APPEND_MESSAGE_VALUES = (
    "%(message_id)s, %(thread_id)s, {seq}, %(author_id)s, 'human', 'text', %(content)s, "
    "ARRAY[]::uuid[], %(client_msg_id)s, %(digest)s, %(now)s, 1"
)
_APPEND_EVENT_COLUMNS = (
    "seq, type, actor_id, actor_kind, space_id, channel_id, thread_id, resource_kind, "
    "resource_id, resource_version, payload, created_at"
)
_APPEND_EVENT_VALUES = (
    "{seq}, 'message.created', %(author_id)s, 'person', %(space_id)s, %(channel_id)s, "
    "%(thread_id)s, 'message', %(message_id)s, 1, "
    "jsonb_build_object('message', %(doc)s::jsonb || jsonb_build_object('thread_seq', {tseq})), "
    "%(now)s"
)


_NEXT_FLOOR_SEQ = f"nextval('{FLOOR_EVENT_SEQUENCE}')"


def _append_one_statement(counter: bool) -> str:
    event_seq = "turnkeeper_event_seq_base() + 1" if counter else _NEXT_FLOOR_SEQ
    return (
        f"WITH seq AS ({_APPEND_THREAD}),\n"
        "message AS (\n"
        f"    INSERT INTO messages ({_APPEND_MESSAGE_COLUMNS})\n"
        f"    SELECT {_APPEND_MESSAGE_VALUES.format(seq='seq.latest_seq')} FROM seq\n"
        "    RETURNING thread_seq\n"
        "),\n"
        "event AS (\n"
        f"    INSERT INTO events ({_APPEND_EVENT_COLUMNS})\n"
        f"    SELECT {_APPEND_EVENT_VALUES.format(seq=event_seq, tseq='message.thread_seq')}\n"
        "    FROM message\n"
        "    RETURNING seq\n"
        ")\n"
        "SELECT message.thread_seq FROM message, event"
    )


#: Floor: thread row update, message insert, event insert in one statement (autocommit).
APPEND_ONE_STATEMENT = _append_one_statement(counter=False)
#: The same with the event's seq as the event log numbers it (from the writer's xid).
APPEND_WITH_COUNTER = _append_one_statement(counter=True)
#: The three statements of the floor, run one by one between BEGIN and COMMIT.
APPEND_STATEMENTS = (
    _APPEND_THREAD,
    f"INSERT INTO messages ({_APPEND_MESSAGE_COLUMNS}) VALUES "
    f"({_APPEND_MESSAGE_VALUES.format(seq='%(thread_seq)s')})",
    f"INSERT INTO events ({_APPEND_EVENT_COLUMNS}) VALUES "
    f"({_APPEND_EVENT_VALUES.format(seq=_NEXT_FLOOR_SEQ, tseq='%(thread_seq)s::bigint')})",
)


# -- createMessage by a person ----------------------------------------------------------------


#: The author's document and grant level in the createMessage statements.
_AUTHOR_DOC = message_doc("m", "w.id", "w.kind", "w.handle")
_AUTHOR_LEVEL = level_of("%(author_id)s", "target.space_id", "target.channel_id")


def _create_message(runs: bool) -> str:
    """The createMessage of a person's text message; with `runs`, opening a run too."""
    run_path = (
        "        WHEN agent_kind IS DISTINCT FROM 'agent' OR run_active OR level < 3\n"
        "             OR NOT agent_reachable THEN 'not_handled'\n"
        "        ELSE 'run'\n"
        if runs
        else "        ELSE 'not_handled'\n"
    )
    run_ctes = (
        "run AS (\n"
        "    INSERT INTO runs (id, thread_id, agent_id, state, trigger_kind,\n"
        "                      triggering_message_id, triggered_by, version, cancel_requested,\n"
        "                      created_at, updated_at)\n"
        "    SELECT %(run_id)s, d.thread_id, d.agent_id, 'queued', 'message', %(message_id)s,\n"
        "           %(author_id)s, 1, false, %(now)s, %(now)s\n"
        "    FROM seq, decision d WHERE seq.path = 'run'\n"
        "    RETURNING id, agent_id\n"
        "),\n"
        "anchor AS (\n"
        "    INSERT INTO messages (id, thread_id, thread_seq, author_id, origin, kind, content,\n"
        "                          mentions, run_id, created_at, version)\n"
        "    SELECT %(anchor_id)s, %(thread_id)s, seq.last, run.agent_id, 'system', 'run', '',\n"
        "           ARRAY[]::uuid[], run.id, %(now)s, 1\n"
        "    FROM seq, run\n"
        "    RETURNING *\n"
        "),\n"
        if runs
        else ""
    )
    run_events = (
        "    UNION ALL\n"
        "    SELECT 2, 0, 'message.created', a.author_id, d.agent_kind, 'message', a.id,\n"
        "           1::bigint, NULL::uuid, a.restricted_to,\n"
        "           jsonb_build_object('message', "
        f"{message_doc('a', 'd.agent_id', 'd.agent_kind', 'd.agent_handle')})\n"
        "    FROM anchor a, decision d\n"
        "    UNION ALL\n"
        "    SELECT 3, 0, 'message.updated', m.author_id, 'person', 'message', m.id, m.version,\n"
        "           NULL::uuid, m.restricted_to,\n"
        f"           jsonb_build_object('message', {_AUTHOR_DOC})\n"
        "    FROM message m, author w WHERE m.version = 2\n"
        "    UNION ALL\n"
        "    SELECT 4, 0, 'agent.invocation', %(author_id)s, 'person', 'run', run.id,\n"
        "           NULL::bigint, run.agent_id, NULL::uuid[],\n"
        "           jsonb_build_object('run_id', run.id, 'thread_id', %(thread_id)s::uuid,\n"
        "                              'message_id', %(message_id)s::uuid)\n"
        "    FROM run\n"
        if runs
        else ""
    )
    return (
        "WITH author AS (\n"
        "    SELECT %(author_id)s::uuid AS id, 'person'::text AS kind,\n"
        "           %(author_handle)s::text AS handle\n"
        "),\n"
        "target AS (\n"
        "    SELECT t.id AS thread_id, t.channel_id, c.space_id, t.state, c.archived,\n"
        "           CASE WHEN t.is_main THEN c.free_response ELSE NOT c.thread_require_mention\n"
        "           END AS answers,\n"
        "           CASE WHEN NOT t.is_main THEN t.operator_agent_id\n"
        "                WHEN c.operator_mode = 'agent' THEN c.operator_id\n"
        "                WHEN c.operator_mode = 'inherit' THEN s.default_operator_id\n"
        "           END AS operator_id\n"
        "    FROM threads t\n"
        "    JOIN channels c ON c.id = t.channel_id\n"
        "    JOIN spaces s ON s.id = c.space_id\n"
        "    WHERE t.id = %(thread_id)s\n"
        "),\n"
        "-- MATERIALIZED: decision reads level up to three times, and an inlined CTE\n"
        "-- would run its grants subquery each time.\n"
        "facts AS MATERIALIZED (\n"
        "    SELECT target.*,\n"
        "           CASE WHEN %(is_owner)s THEN 3\n"
        f"                ELSE {_AUTHOR_LEVEL}\n"
        "           END AS level,\n"
        "           op.id AS agent_id, op.kind AS agent_kind, op.handle AS agent_handle,\n"
        "           coalesce(op.enabled AND NOT (op.billing_mode IS NOT DISTINCT FROM 'personal'\n"
        "                    AND op.holder_id IS DISTINCT FROM %(author_id)s), false)\n"
        "               AS agent_reachable,\n"
        "           EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = target.thread_id\n"
        "                   AND r.state IN ('queued', 'running', 'waiting_input')) AS run_active,\n"
        "           dup.id AS dup_id, dup.digest AS dup_digest\n"
        "    FROM target\n"
        "    LEFT JOIN principals op ON op.id = target.operator_id\n"
        "    LEFT JOIN messages dup\n"
        "        ON dup.author_id = %(author_id)s AND dup.client_msg_id = %(client_msg_id)s\n"
        "),\n"
        "decision AS (\n"
        "    SELECT facts.*, CASE\n"
        "        WHEN level < 1 THEN 'not_found'\n"
        "        WHEN archived THEN 'channel_read_only'\n"
        "        WHEN level < 2 THEN 'forbidden'\n"
        "        WHEN dup_id IS NOT NULL AND dup_digest = %(digest)s THEN 'replay'\n"
        "        WHEN dup_id IS NOT NULL THEN 'idempotency_conflict'\n"
        "        WHEN state <> 'open' THEN 'not_handled'\n"
        "        WHEN operator_id IS NULL OR NOT answers THEN 'plain'\n"
        f"{run_path}"
        "    END AS path\n"
        "    FROM facts\n"
        "),\n"
        f"{take_token(APPENDING_PATHS)},\n"
        "seq AS (\n"
        "    UPDATE threads t SET latest_seq = t.latest_seq\n"
        "        + CASE WHEN d.path = 'run' THEN 2 ELSE 1 END\n"
        "    FROM decision d\n"
        "    WHERE t.id = d.thread_id AND EXISTS (SELECT 1 FROM token)\n"
        "    RETURNING t.latest_seq AS last, d.path\n"
        "),\n"
        "message AS (\n"
        "    INSERT INTO messages (id, thread_id, thread_seq, author_id, origin, kind, content,\n"
        "                          mentions, client_msg_id, digest, trigger_state, created_at,\n"
        "                          version)\n"
        "    SELECT %(message_id)s, %(thread_id)s,\n"
        "           seq.last - CASE WHEN seq.path = 'run' THEN 1 ELSE 0 END,\n"
        "           %(author_id)s, 'human', 'text', %(content)s, ARRAY[]::uuid[],\n"
        "           %(client_msg_id)s, %(digest)s,\n"
        "           CASE WHEN seq.path = 'run' THEN 'received' END, %(now)s,\n"
        "           CASE WHEN seq.path = 'run' THEN 2 ELSE 1 END\n"
        "    FROM seq\n"
        "    RETURNING *\n"
        "),\n"
        f"{run_ctes}"
        "new_events AS (\n"
        "    -- message.created shows the message as the append stored it: version 1, no\n"
        "    -- trigger_state (the run path stores it right away as the run left it).\n"
        f"    SELECT 1 AS grp, 0::bigint AS sub, 'message.created'::text AS type,\n"
        "           m.author_id AS actor_id, 'person'::text AS actor_kind,\n"
        "           'message'::text AS resource_kind, m.id AS resource_id,\n"
        "           1::bigint AS resource_version, NULL::uuid AS audience_id,\n"
        "           m.restricted_to AS restricted_to,\n"
        "           jsonb_build_object('message',\n"
        f"               ({_AUTHOR_DOC} - 'trigger_state') || jsonb_build_object('version', 1))\n"
        "               AS payload\n"
        "    FROM message m, author w\n"
        f"{run_events}"
        "),\n"
        f"{append_events('d.space_id', 'd.channel_id', 'd.thread_id', 'decision d')}\n"
        "SELECT CASE WHEN d.path IN ('plain', 'run') AND NOT EXISTS (SELECT 1 FROM token)\n"
        "            THEN 'rate_limited' ELSE d.path END AS path,\n"
        "       (SELECT thread_seq FROM message) AS thread_seq,\n"
        "       (SELECT count(*) FROM appended) AS events\n"
        "FROM decision d"
    )


#: createMessage of a person, plain or opening a run, in one statement.
CREATE_MESSAGE = _create_message(runs=True)
#: Everything a plain message checks and writes, in one statement (declines a trigger).
PLAIN_MESSAGE = _create_message(runs=False)


__all__ = [
    "APPEND_ONE_STATEMENT",
    "APPEND_STATEMENTS",
    "APPEND_WITH_COUNTER",
    "CREATE_FLOOR_EVENT_SEQUENCE",
    "CREATE_MESSAGE",
    "FLOOR_EVENT_SEQUENCE",
    "PLAIN_MESSAGE",
]
