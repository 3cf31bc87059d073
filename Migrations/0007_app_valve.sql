-- The wrong-environment safety valve, judged per app over a rolling window of its recent answers across all
-- its jobs (one-token jobs included), not per job.

-- Answers per app and minute, added in the same transaction that records the outcomes. The valve reads the
-- newest minutes until they hold enough answers; maintenance drops minutes older than a week.
CREATE TABLE push.app_answer_window (
    app_id            text NOT NULL,
    minute            timestamptz NOT NULL,
    answered          bigint NOT NULL DEFAULT 0,
    bad_device_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (app_id, minute)
);
ALTER TABLE push.app_answer_window SET (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 200, fillfactor = 50);

-- A BadDeviceToken/DeviceTokenNotForTopic report waits until the app's window is healthy. When the valve
-- trips, the reports it judged are suppressed: kept, never pruned on their own. An operator who knows the
-- audience really is stale confirms them (push.confirm_stale_audience), and the pruner deletes those devices.
ALTER TABLE push.prune_candidates
    ADD COLUMN suppressed boolean NOT NULL DEFAULT false,
    ADD COLUMN confirmed boolean NOT NULL DEFAULT false;
CREATE INDEX prune_candidates_by_app ON push.prune_candidates (app_id, id);

-- Answers before this moment do not count in the app's window: set when the app is resumed (it was fixed)
-- or its stale audience confirmed.
ALTER TABLE push.apps ADD COLUMN valve_reset_at timestamptz;

-- Resuming an app restarts its window and forgets the reports the valve suppressed: the operator fixed the
-- cause, so those devices are not dead.
CREATE FUNCTION push.apps_resumed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
BEGIN
    IF OLD.paused_reason IS NOT NULL AND NEW.paused_reason IS NULL THEN
        NEW.valve_reset_at := now();
        DELETE FROM push.prune_candidates c WHERE c.app_id = NEW.id AND c.suppressed AND NOT c.confirmed;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER apps_resumed BEFORE UPDATE OF paused_reason ON push.apps
    FOR EACH ROW EXECUTE FUNCTION push.apps_resumed();

-- Every operator decision that overrides a safety check, with who made it and why.
CREATE TABLE push.operator_audit (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text NOT NULL DEFAULT session_user,
    action  text NOT NULL,
    app_id  text,
    detail  text
);

-- The operator's word that an app's BadDeviceToken answers are real (the audience is stale, not the
-- environment wrong): its suppressed and waiting reports are confirmed for pruning, a valve pause is lifted
-- and the window restarts. Returns how many reports were confirmed. Audited.
CREATE FUNCTION push.confirm_stale_audience(app_id text, note text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    confirmed_count bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = confirm_stale_audience.app_id) THEN
        RAISE EXCEPTION 'unknown app_id: %', confirm_stale_audience.app_id USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    UPDATE push.prune_candidates c SET confirmed = true, suppressed = false
     WHERE c.app_id = confirm_stale_audience.app_id AND NOT c.confirmed
       AND c.reason IN ('BadDeviceToken', 'DeviceTokenNotForTopic');
    GET DIAGNOSTICS confirmed_count = ROW_COUNT;
    UPDATE push.apps a SET valve_reset_at = now(), updated_at = now()
     WHERE a.id = confirm_stale_audience.app_id;
    UPDATE push.apps a SET paused_reason = NULL, paused_at = NULL, updated_at = now()
     WHERE a.id = confirm_stale_audience.app_id AND a.paused_reason LIKE 'BadDeviceToken safety valve:%';
    INSERT INTO push.operator_audit (action, app_id, detail)
    VALUES ('confirm_stale_audience', confirm_stale_audience.app_id,
            confirmed_count || ' BadDeviceToken/DeviceTokenNotForTopic reports confirmed for pruning'
            || coalesce('; note: ' || note, ''));
    RETURN confirmed_count;
END;
$$;

REVOKE ALL ON push.app_answer_window, push.operator_audit FROM PUBLIC;
REVOKE ALL ON FUNCTION push.confirm_stale_audience(text, text), push.apps_resumed() FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON push.app_answer_window TO pgpush_worker;
GRANT SELECT ON push.operator_audit TO pgpush_worker, pgpush_reader;

-- Retention: maintenance removes finished jobs, their pruning audit rows and old prune candidates after the
-- configured retention, in small batches, each found through an index (a table of a million finished jobs
-- must not be scanned by every pass).
CREATE INDEX jobs_finished ON push.jobs (finished_at) WHERE state IN ('done', 'failed', 'cancelled');
CREATE INDEX pruned_devices_by_time ON push.pruned_devices (pruned_at);
CREATE INDEX prune_candidates_by_time ON push.prune_candidates (reported_at);
