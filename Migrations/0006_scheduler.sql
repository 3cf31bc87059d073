-- The notification scheduler: cancels reach the workers holding a job's chunks at once.

-- push.cancel as before, plus a NOTIFY with the job id: a worker that holds chunks of the job stops sending
-- them at its next token. The NOTIFY is a hint; the claim and the completion check the job's state as well.
CREATE OR REPLACE FUNCTION push.cancel(job_id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    updated bigint;
BEGIN
    UPDATE push.jobs j SET state = 'cancelled', finished_at = now()
     WHERE j.id = cancel.job_id AND j.state IN ('queued', 'running')
    RETURNING j.id INTO updated;
    IF updated IS NULL THEN
        IF NOT EXISTS (SELECT 1 FROM push.jobs j WHERE j.id = cancel.job_id) THEN
            RAISE EXCEPTION 'unknown job_id: %', cancel.job_id USING ERRCODE = 'no_data_found', COLUMN = 'job_id';
        END IF;
        RETURN false;
    END IF;
    DELETE FROM push.chunks c WHERE c.job_id = cancel.job_id AND c.locked_by IS NULL;
    PERFORM pg_notify('pgpush_cancel', cancel.job_id::text);
    RETURN true;
END;
$$;

-- A job whose requests APNs refuses for every token (InvalidPushType, TopicDisallowed for a suffixed topic,
-- BadExpirationDate, …) fails with that reason; the app's other jobs go on. Only workers write it.
ALTER TABLE push.jobs ADD COLUMN failure_reason text;

CREATE OR REPLACE FUNCTION push.reset_job_failure() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, push AS $$
BEGIN
    NEW.failure_reason := NULL;
    RETURN NEW;
END;
$$;
CREATE TRIGGER jobs_reset_failure BEFORE INSERT ON push.jobs FOR EACH ROW EXECUTE FUNCTION push.reset_job_failure();

-- job_progress shows why a job failed; the new column goes last, so existing queries keep working.
CREATE OR REPLACE VIEW push.job_progress AS
SELECT j.id AS job_id,
       j.app_id,
       j.state,
       t.total,
       j.delivered,
       j.failed + j.expired AS failed,
       j.pruned,
       CASE WHEN j.state IN ('queued', 'running')
            THEN greatest(t.total - j.delivered - j.failed - j.expired, 0) ELSE 0 END AS pending,
       j.created_at,
       j.started_at,
       j.finished_at,
       j.expired,
       j.priority,
       j.send_at,
       j.first_sent_at,
       j.failure_reason
  FROM push.jobs j
  -- A job not expanded yet is counted by the index of its own audience: one `OR`ed predicate over every kind
  -- of audience cannot use any index, and thousands of queued one-user jobs each scanned all of the app's
  -- devices whenever the backlog was read.
  CROSS JOIN LATERAL (
      SELECT coalesce(
          j.total,
          cardinality(j.tokens)::bigint,
          CASE WHEN j.user_ids IS NOT NULL
               THEN (SELECT count(*) FROM push.devices d WHERE d.app_id = j.app_id AND d.user_id = ANY (j.user_ids))
               WHEN j.tags IS NOT NULL
               THEN (SELECT count(*) FROM push.devices d WHERE d.app_id = j.app_id AND d.tags && j.tags)
               ELSE (SELECT count(*) FROM push.devices d WHERE d.app_id = j.app_id) END
      ) AS total
  ) t;

-- Claims and lease renewals update locked_by and locked_until; with no index on them those updates are HOT
-- (heap-only), which matters at thousands of one-token chunks a second. The heartbeat and the release read
-- this process's chunks by a scan of a table kept small by deleting finished chunks.
DROP INDEX push.chunks_locked;
