-- What the dashboard's groups of 0018 may do: pgpush_dashboard reads the views (as pgpush_reader) and the
-- tables the pages read directly; pgpush_dashboard_actions adds --allow-actions: cancel, pause, resume, audit.

-- Memberships are cluster-wide like the roles: the migration of another database may be granting the same one
-- right now, and the second of two concurrent grants fails on the first's row. It is tried again (it then
-- finds the membership there) for up to 10 s.
DO $$
DECLARE
    attempts integer := 0;
BEGIN
    LOOP
        BEGIN
            IF NOT pg_has_role('pgpush_dashboard', 'pgpush_reader', 'MEMBER') THEN
                GRANT pgpush_reader TO pgpush_dashboard;
            END IF;
            IF NOT pg_has_role('pgpush_dashboard_actions', 'pgpush_dashboard', 'MEMBER') THEN
                GRANT pgpush_dashboard TO pgpush_dashboard_actions;
            END IF;
            EXIT;
        EXCEPTION WHEN unique_violation OR undefined_object OR duplicate_object THEN
            attempts := attempts + 1;
            IF attempts >= 200 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.05);
        END;
    END LOOP;
END;
$$;

GRANT SELECT ON push.apps, push.jobs, push.deliveries, push.pruned_devices, push.prune_candidates, push.workers,
                push.app_answer_window, push.operator_audit, push.channels
   TO pgpush_dashboard;
GRANT UPDATE (paused_reason, paused_at, updated_at) ON push.apps TO pgpush_dashboard_actions;
GRANT INSERT ON push.operator_audit TO pgpush_dashboard_actions;
GRANT EXECUTE ON FUNCTION push.cancel(bigint) TO pgpush_dashboard_actions;
