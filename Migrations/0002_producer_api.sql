-- The producer's SQL API: push.register_device, push.enqueue, push.cancel, and the validation that a plain
-- INSERT INTO push.jobs goes through too. Every error names the field it is about, and since it is raised in
-- the producer's statement, a failed enqueue leaves nothing behind.

CREATE FUNCTION push.validate_job() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
DECLARE
    app            push.apps%ROWTYPE;
    limit_bytes    integer;
    payload_bytes  integer;
    bad_token      text;
    audiences      integer;
BEGIN
    IF NEW.app_id IS NULL THEN
        RAISE EXCEPTION 'app_id is required' USING ERRCODE = 'not_null_violation', COLUMN = 'app_id';
    END IF;
    SELECT * INTO app FROM push.apps WHERE id = NEW.app_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown app_id: %', NEW.app_id USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;

    IF NEW.payload IS NULL OR jsonb_typeof(NEW.payload) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object'
            USING ERRCODE = 'check_violation', COLUMN = 'payload';
    END IF;
    IF jsonb_typeof(NEW.payload -> 'aps') IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'payload has no "aps" dictionary'
            USING ERRCODE = 'check_violation', COLUMN = 'payload';
    END IF;

    NEW.push_type := coalesce(NEW.push_type, 'alert');
    IF NEW.push_type NOT IN ('alert', 'background', 'location', 'voip', 'complication', 'fileprovider',
                             'mdm', 'liveactivity', 'pushtotalk', 'widgets') THEN
        RAISE EXCEPTION 'push_type % is not one of APNs'' push types (alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets)', quote_literal(NEW.push_type)
            USING ERRCODE = 'check_violation', COLUMN = 'push_type';
    END IF;

    -- Measured on the exact bytes the worker sends: the jsonb's text form.
    limit_bytes := CASE WHEN NEW.push_type = 'voip' THEN 5120 ELSE 4096 END;
    payload_bytes := octet_length(NEW.payload::text);
    IF payload_bytes > limit_bytes THEN
        RAISE EXCEPTION 'payload is % bytes, over the %-byte limit for push_type %', payload_bytes, limit_bytes, NEW.push_type
            USING ERRCODE = 'check_violation', COLUMN = 'payload';
    END IF;

    IF NEW.apns_priority IS NULL THEN
        NEW.apns_priority := CASE WHEN NEW.push_type = 'background' THEN 5 ELSE 10 END;
    ELSIF NEW.apns_priority NOT IN (10, 5, 1) THEN
        RAISE EXCEPTION 'apns_priority % is not valid: APNs accepts 10, 5 or 1', NEW.apns_priority
            USING ERRCODE = 'check_violation', COLUMN = 'apns_priority';
    ELSIF NEW.push_type = 'background' AND NEW.apns_priority = 10 THEN
        RAISE EXCEPTION 'apns_priority 10 is not allowed for push_type background: APNs requires 5 or 1'
            USING ERRCODE = 'check_violation', COLUMN = 'apns_priority';
    END IF;

    IF NEW.collapse_id IS NOT NULL AND octet_length(NEW.collapse_id) > 64 THEN
        RAISE EXCEPTION 'collapse_id is % bytes, over the 64-byte limit', octet_length(NEW.collapse_id)
            USING ERRCODE = 'check_violation', COLUMN = 'collapse_id';
    END IF;

    NEW.send_at := coalesce(NEW.send_at, now());
    IF NEW.expires_at IS NOT NULL AND NEW.expires_at <= now() THEN
        RAISE EXCEPTION 'expires_at % is already in the past', NEW.expires_at
            USING ERRCODE = 'check_violation', COLUMN = 'expires_at';
    END IF;
    IF NEW.expires_at IS NOT NULL AND NEW.expires_at <= NEW.send_at THEN
        RAISE EXCEPTION 'expires_at % is not after send_at %', NEW.expires_at, NEW.send_at
            USING ERRCODE = 'check_violation', COLUMN = 'expires_at';
    END IF;

    audiences := (NEW.tokens IS NOT NULL)::int + (NEW.user_ids IS NOT NULL)::int + (NEW.tags IS NOT NULL)::int;
    IF audiences > 1 THEN
        RAISE EXCEPTION 'give at most one audience: tokens, user_ids or tags'
            USING ERRCODE = 'check_violation', COLUMN = 'tokens';
    END IF;
    IF NEW.tokens IS NOT NULL THEN
        IF cardinality(NEW.tokens) = 0 THEN
            RAISE EXCEPTION 'tokens is an empty list: the audience would be empty'
                USING ERRCODE = 'check_violation', COLUMN = 'tokens';
        END IF;
        SELECT t INTO bad_token FROM unnest(NEW.tokens) AS t
         WHERE t IS NULL OR t !~ '^[0-9A-Fa-f]{64,200}$' LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'tokens contains an invalid device token %: a token is 64 to 200 hex characters',
                coalesce(quote_literal(left(bad_token, 12) || CASE WHEN length(bad_token) > 12 THEN '…' ELSE '' END), 'NULL')
                USING ERRCODE = 'check_violation', COLUMN = 'tokens';
        END IF;
        -- Normalised once here so a chunk's index range means the same thing to every worker.
        NEW.tokens := ARRAY(SELECT DISTINCT lower(t) FROM unnest(NEW.tokens) AS t ORDER BY 1);
    END IF;
    IF NEW.user_ids IS NOT NULL AND (cardinality(NEW.user_ids) = 0 OR array_position(NEW.user_ids, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'user_ids must be a non-empty list without NULLs'
            USING ERRCODE = 'check_violation', COLUMN = 'user_ids';
    END IF;
    IF NEW.tags IS NOT NULL AND (cardinality(NEW.tags) = 0 OR array_position(NEW.tags, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'tags must be a non-empty list without NULLs'
            USING ERRCODE = 'check_violation', COLUMN = 'tags';
    END IF;

    NEW.priority := coalesce(NEW.priority, 0);
    -- A producer only ever creates queued work; the progress columns belong to the workers.
    NEW.state := 'queued';
    NEW.total := NULL;
    NEW.delivered := 0; NEW.failed := 0; NEW.expired := 0; NEW.pruned := 0;
    NEW.answered := 0; NEW.bad_device_tokens := 0; NEW.prune_suppressed := false;
    NEW.created_at := now();
    NEW.started_at := NULL; NEW.first_sent_at := NULL; NEW.finished_at := NULL;
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_validate BEFORE INSERT ON push.jobs FOR EACH ROW EXECUTE FUNCTION push.validate_job();

-- One NOTIFY per statement, never per row: NOTIFY takes a cluster-wide lock at commit. It is a hint only;
-- workers also poll every second.
CREATE FUNCTION push.notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
BEGIN
    PERFORM pg_notify('pgpush_jobs', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify AFTER INSERT ON push.jobs FOR EACH STATEMENT EXECUTE FUNCTION push.notify_jobs_inserted();

CREATE FUNCTION push.register_device(
    app_id   text,
    token    text,
    user_id  text DEFAULT NULL,
    tags     text[] DEFAULT '{}',
    replaces text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    normalized text := lower(register_device.token);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = register_device.app_id) THEN
        RAISE EXCEPTION 'unknown app_id: %', register_device.app_id
            USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    IF register_device.token IS NULL OR register_device.token !~ '^[0-9A-Fa-f]{64,200}$' THEN
        RAISE EXCEPTION 'token is not a valid device token: a token is 64 to 200 hex characters'
            USING ERRCODE = 'check_violation', COLUMN = 'token';
    END IF;
    IF register_device.tags IS NULL OR array_position(register_device.tags, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'tags must be a list without NULLs' USING ERRCODE = 'check_violation', COLUMN = 'tags';
    END IF;
    IF register_device.replaces IS NOT NULL AND register_device.replaces !~ '^[0-9A-Fa-f]{64,200}$' THEN
        RAISE EXCEPTION 'replaces is not a valid device token: a token is 64 to 200 hex characters'
            USING ERRCODE = 'check_violation', COLUMN = 'replaces';
    END IF;

    INSERT INTO push.devices AS d (app_id, token, user_id, tags, registered_at)
    VALUES (register_device.app_id, normalized, register_device.user_id, register_device.tags, clock_timestamp())
    ON CONFLICT ON CONSTRAINT devices_pkey DO UPDATE
       SET user_id = EXCLUDED.user_id, tags = EXCLUDED.tags, registered_at = EXCLUDED.registered_at;

    IF register_device.replaces IS NOT NULL AND lower(register_device.replaces) <> normalized THEN
        DELETE FROM push.devices d
         WHERE d.app_id = register_device.app_id AND d.token = lower(register_device.replaces);
    END IF;
END;
$$;

CREATE FUNCTION push.enqueue(
    app_id          text,
    payload         jsonb,
    push_type       text DEFAULT 'alert',
    apns_priority   integer DEFAULT NULL,
    tokens          text[] DEFAULT NULL,
    user_ids        text[] DEFAULT NULL,
    tags            text[] DEFAULT NULL,
    send_at         timestamptz DEFAULT now(),
    expires_at      timestamptz DEFAULT NULL,
    collapse_id     text DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    priority        integer DEFAULT 0
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    job_id bigint;
BEGIN
    INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at,
                                expires_at, collapse_id, idempotency_key, priority)
    VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
            enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
            enqueue.idempotency_key, enqueue.priority)
    ON CONFLICT (app_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO job_id;

    IF job_id IS NULL THEN
        -- The key was used before (or by a concurrent producer that has now committed): same broadcast.
        SELECT j.id INTO job_id FROM push.jobs j
         WHERE j.app_id = enqueue.app_id AND j.idempotency_key = enqueue.idempotency_key;
    END IF;
    RETURN job_id;
END;
$$;

-- Cancels a queued or running job: chunks not yet claimed are deleted at once; chunks already in flight
-- finish and record their outcomes, and nothing is retried afterwards. Returns false when the job had
-- already ended.
CREATE FUNCTION push.cancel(job_id bigint) RETURNS boolean
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
    RETURN true;
END;
$$;
