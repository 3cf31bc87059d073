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

-- Delivery partitions four weeks at a time. Creating a partition takes an ACCESS EXCLUSIVE lock on
-- push.deliveries; a hot standby replays that lock, so its replay waits for every report reading
-- push.deliveries (up to max_standby_streaming_delay) and then cancels them. ATTACH PARTITION would not avoid
-- it: with a default partition, attaching locks the default partition the same way. So the lock is taken
-- rarely: nothing happens while the next `days_ahead` days exist; when one is missing, every missing day up to
-- four weeks further is created in the same transaction, one replay conflict instead of twenty-eight.
CREATE OR REPLACE FUNCTION push.ensure_delivery_partitions(days_ahead integer DEFAULT 3) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
DECLARE
    today   date := (now() AT TIME ZONE 'UTC')::date;
    day     date;
    name    text;
    created integer := 0;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM generate_series(0, greatest(days_ahead, 0)) AS i
         WHERE to_regclass('push.deliveries_' || to_char(today + i, 'YYYYMMDD')) IS NULL)
    THEN
        RETURN 0;
    END IF;
    FOR i IN 0 .. greatest(days_ahead, 0) + 28 LOOP
        day := today + i;
        name := 'deliveries_' || to_char(day, 'YYYYMMDD');
        IF to_regclass('push.' || name) IS NULL THEN
            -- A default partition that already holds rows for this day would block the new partition; such
            -- rows only exist if maintenance was down, and they stay where they are (the default partition).
            BEGIN
                EXECUTE format(
                    'CREATE TABLE push.%I PARTITION OF push.deliveries FOR VALUES FROM (%L) TO (%L) '
                    'WITH (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0)',
                    name, (day::timestamp AT TIME ZONE 'UTC'), ((day + 1)::timestamp AT TIME ZONE 'UTC'));
                created := created + 1;
            EXCEPTION WHEN check_violation OR duplicate_table THEN
                NULL;
            END;
        END IF;
    END LOOP;
    RETURN created;
END;
$$;
SELECT push.ensure_delivery_partitions(3);
