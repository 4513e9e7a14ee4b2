-- The frontier a thread was last closed at (issue 16 item 3), so that `turnkeeper check`
-- can prove "no message after a done state without a reopen": the message right after a
-- close is the reopen system line, and a done thread has nothing after its close.
--
-- Written by the close itself (SetThreadState, under the thread row lock). Threads
-- closed before this migration have no record (NULL): nothing is claimed about them.

ALTER TABLE threads
    ADD COLUMN closed_at_seq bigint NULL CONSTRAINT threads_closed_at_seq_check
        CHECK (closed_at_seq >= 0 AND closed_at_seq <= latest_seq);
