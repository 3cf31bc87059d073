-- One row trigger validates an enqueued job instead of four. Each trigger call, and each SECURITY DEFINER
-- function with a search_path, costs a function call with its own settings; a one-user notification paid
-- for four of them (171 µs an enqueue, 92 µs of it in triggers). push.validate_job now does, in the order
-- the separate triggers fired (by name): the app grant check of 0008, the idempotency key's length of 0008,
-- the reset of failure_reason of 0006, then the validation of 0009.

DROP TRIGGER jobs_check_grant ON push.jobs;
DROP TRIGGER jobs_check_idempotency_key ON push.jobs;
DROP TRIGGER jobs_reset_failure ON push.jobs;
DROP FUNCTION push.jobs_check_grant();
DROP FUNCTION push.jobs_check_idempotency_key();
DROP FUNCTION push.reset_job_failure();

CREATE OR REPLACE FUNCTION push.validate_job() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
DECLARE
    app            push.apps%ROWTYPE;
    has_apns       boolean;
    has_fcm        boolean;
    limit_bytes    integer;
    payload_bytes  integer;
    bad_token      text;
    reserved_key   text;
    audiences      integer;
BEGIN
    -- Checked before anything else, the idempotency lookup included, so a restricted login learns nothing of
    -- another app's jobs. Until the first grant nobody is restricted, and that costs one probe.
    IF EXISTS (SELECT 1 FROM push.app_grants) THEN
        PERFORM push.check_app_granted(NEW.app_id);
    END IF;
    IF octet_length(NEW.idempotency_key) > 255 THEN
        RAISE EXCEPTION 'idempotency_key is % bytes, over the 255-byte limit', octet_length(NEW.idempotency_key)
            USING ERRCODE = 'check_violation', COLUMN = 'idempotency_key';
    END IF;
    -- Only workers write it.
    NEW.failure_reason := NULL;

    IF NEW.app_id IS NULL THEN
        RAISE EXCEPTION 'app_id is required' USING ERRCODE = 'not_null_violation', COLUMN = 'app_id';
    END IF;
    SELECT * INTO app FROM push.apps WHERE id = NEW.app_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown app_id: %', NEW.app_id USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    has_apns := app.private_key_path IS NOT NULL OR app.certificate_path IS NOT NULL;
    has_fcm := app.fcm_project_id IS NOT NULL;

    IF NEW.payload IS NULL AND NOT has_apns THEN
        NEW.payload := '{}';
    END IF;
    IF NEW.payload IS NULL OR jsonb_typeof(NEW.payload) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object'
            USING ERRCODE = 'check_violation', COLUMN = 'payload';
    END IF;
    IF has_apns AND jsonb_typeof(NEW.payload -> 'aps') IS DISTINCT FROM 'object' THEN
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

    IF NEW.fcm IS NOT NULL AND NOT has_fcm THEN
        RAISE EXCEPTION 'fcm is given, but app % has no FCM credentials (fcm_project_id)', NEW.app_id
            USING ERRCODE = 'check_violation', COLUMN = 'fcm';
    END IF;
    IF has_fcm THEN
        IF NEW.fcm IS NULL THEN
            SELECT k INTO reserved_key FROM jsonb_object_keys(NEW.payload) AS k
             WHERE k IN ('from', 'message_type') OR k LIKE 'google.%' OR k LIKE 'gcm.%' LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'payload key "%" cannot become FCM data (FCM reserves from, message_type, google.*, gcm.*): give the Android message as fcm', reserved_key
                    USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            END IF;
            NEW.fcm := push.fcm_from_apns(NEW.payload, NEW.push_type, NEW.apns_priority, NEW.collapse_id);
        END IF;
        NEW.fcm := push.validate_fcm_message(NEW.fcm);
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
        SELECT t INTO bad_token FROM unnest(NEW.tokens) AS t WHERE push.token_platform(t, has_apns, has_fcm) IS NULL LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'tokens contains an invalid device token %: %',
                coalesce(quote_literal(left(bad_token, 12) || CASE WHEN length(bad_token) > 12 THEN '…' ELSE '' END), 'NULL'),
                CASE WHEN has_apns AND has_fcm
                     THEN 'an APNs token is 64 to 200 hex characters, an FCM registration token 16 to 1024 of A-Z, a-z, 0-9, ''_'', ''-'' and '':'''
                     WHEN has_fcm
                     THEN 'an FCM registration token is 16 to 1024 of A-Z, a-z, 0-9, ''_'', ''-'' and '':'''
                     ELSE 'a token is 64 to 200 hex characters' END
                USING ERRCODE = 'check_violation', COLUMN = 'tokens';
        END IF;
        -- Normalised once here so a chunk's index range means the same thing to every worker. FCM tokens are
        -- case-sensitive and kept as given.
        NEW.tokens := ARRAY(SELECT DISTINCT CASE WHEN push.token_platform(t, has_apns, has_fcm) = 'ios' THEN lower(t) ELSE t END
                              FROM unnest(NEW.tokens) AS t ORDER BY 1);
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
