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
