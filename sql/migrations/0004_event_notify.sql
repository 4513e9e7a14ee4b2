-- Live delivery: every statement that appends events sends one NOTIFY on the channel
-- turnkeeper_events, inside the appending transaction, so PostgreSQL delivers it to
-- every listening server process when (and only if) that transaction commits.
--
-- The payload names no content and no token: the highest seq appended, then the feeds
-- of the events, separated by spaces ('*' for the shared feed, the audience's uuid for a
-- personal event), or 'all' instead of the feeds when they would not fit the payload
-- limit of PostgreSQL (8000 bytes). A listener only learns which readers to wake; they
-- read the events through the normal cursor rules.

CREATE FUNCTION turnkeeper_notify_events() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    top   bigint;
    feeds text;
BEGIN
    SELECT max(seq), string_agg(DISTINCT coalesce(audience_id::text, '*'), ' ')
    INTO top, feeds
    FROM appended;
    IF top IS NULL THEN
        RETURN NULL;
    END IF;
    IF octet_length(feeds) > 7000 THEN
        feeds := 'all';
    END IF;
    PERFORM pg_notify('turnkeeper_events', top::text || ' ' || feeds);
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_notify
    AFTER INSERT ON events
    REFERENCING NEW TABLE AS appended
    FOR EACH STATEMENT
    EXECUTE FUNCTION turnkeeper_notify_events();
