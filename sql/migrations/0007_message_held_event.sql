-- message.held (issue 21): an agent send that the freshness gate held stores no message;
-- it writes one event with the thread as its resource and the owner as its only reader
-- (restricted_to), so that the console shows held sends to the owner. Its payload names
-- the agent and the frontiers, never the content. Readers find it through the existing
-- columns: no new column, index or statement.

ALTER TABLE events DROP CONSTRAINT events_type_check;
-- domain.events.EventType
ALTER TABLE events ADD CONSTRAINT events_type_check
    CHECK (type IN ('thread.created', 'thread.reopened',
                    'message.created', 'message.updated', 'message.held',
                    'run.state_changed', 'agent.invocation',
                    'agent.followup', 'run.cancel_requested'));
