-- Least-privilege groups for `pgpush dashboard`'s login. pgpush_dashboard reads what the pages show: the
-- views (as pgpush_reader) and the tables the dashboard reads directly, every read filtered by
-- push.granted_apps() in its statements. pgpush_dashboard_actions adds what --allow-actions does: cancel a
-- job, pause and resume an app, each with an audit row. Like the other roles they are NOLOGIN groups:
--   CREATE ROLE dashboard LOGIN PASSWORD '…' IN ROLE pgpush_dashboard;            -- read-only
--   CREATE ROLE dashboard_ops LOGIN PASSWORD '…' IN ROLE pgpush_dashboard_actions; -- with --allow-actions
-- Roles are cluster-wide, so creating them tolerates another database's migration having done it first. The
-- grants are the next migration, in a transaction of their own: a concurrent migration of another database
-- that created a role first has committed it by then, whatever this transaction saw of it.

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['pgpush_dashboard', 'pgpush_dashboard_actions'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
END;
$$;
