-- pgpush through PgBouncer in transaction pooling: nothing may depend on the state of one server session.

-- jit off for every session of this database. pgpush's statements are short, and the planner's estimates for
-- the views it polls (push.job_progress, push.queue_backlog) cross the JIT threshold, so PostgreSQL would spend
-- some 80 ms compiling a read that runs in a millisecond. pgpush used to send `jit = off` as a startup
-- parameter; PgBouncer refuses unknown startup parameters, so it is the database's setting now. A migration
-- run by a role that does not own the database says what to run instead.
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'pgpush: could not turn JIT off for this database; as its owner run: ALTER DATABASE % SET jit = off',
        quote_ident(current_database());
END
$$;

-- Maintenance leadership as a lease row. A session advisory lock is released whenever the pooler hands the
-- server connection to another client, so through transaction pooling two leaders could run at once. The row
-- names its holder and when the lease runs out; the holder renews it during its pass, and anyone may take it
-- once it ran out (a leader that died is replaced within one lease).
CREATE TABLE push.leader_leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL,
    taken_at   timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE push.leader_leases SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100);
REVOKE ALL ON push.leader_leases FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON push.leader_leases TO pgpush_worker;
GRANT SELECT ON push.leader_leases TO pgpush_reader;
