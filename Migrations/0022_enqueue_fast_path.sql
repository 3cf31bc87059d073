-- push.enqueue of the common job, cheaper in database time: push.validate_job checks an ordinary job (APNs only,
-- one audience of at most one token, nothing a worker owns set) in one statement and one condition before the
-- full checks, which every other job still takes. Nothing a producer or worker sees changes (BENCHMARKS.md).

CREATE OR REPLACE FUNCTION push.validate_job()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'push'
AS $function$
DECLARE
    app            push.apps%ROWTYPE;
    has_apns       boolean;
    has_fcm        boolean;
    limit_bytes    integer;
    payload_bytes  integer;
    bad_token      text;
    reserved_key   text;
    audiences      integer;
    live           boolean;
    aps            jsonb;
    event          text;
    channel_row    push.channels%ROWTYPE;
    invalid        boolean;
    one_token      text;
    one_platform   text;
BEGIN
    -- fast path: begin
    -- The common job (an app with APNs credentials only, no grants anywhere, not a Live Activity, at most one
    -- audience and at most one token, every field within its limits, the progress columns at their defaults)
    -- in one statement and one condition. PL/pgSQL prepares each expression it evaluates once per transaction,
    -- so the full checks below cost more to set up than to run: about a third of push.enqueue's time. The
    -- condition only proves that every check below would pass, and stores what they would store; any other job,
    -- and any condition that comes out NULL, takes the full path, which raises the same errors in the same
    -- order. Reading the app first changes nothing: on this path no error follows. A check added below must be
    -- added here too: EnqueueFastPathTests compares both paths.
    SELECT a.private_key_path IS NOT NULL OR a.certificate_path IS NOT NULL, a.fcm_project_id IS NOT NULL
      INTO has_apns, has_fcm
      FROM push.apps a
     WHERE a.id = NEW.app_id AND NOT EXISTS (SELECT 1 FROM push.app_grants);
    IF has_apns AND NOT has_fcm
       AND NEW.failure_reason IS NULL AND NEW.channel_id IS NULL AND NEW.audience_kind = 'device'
       AND NEW.fcm IS NULL AND NEW.channel IS NULL AND NEW.activity_ids IS NULL AND NEW.activity_type IS NULL
       AND (NEW.idempotency_key IS NULL OR octet_length(NEW.idempotency_key) <= 255)
       AND jsonb_typeof(NEW.payload) = 'object' AND jsonb_typeof(NEW.payload -> 'aps') = 'object'
       AND coalesce(NEW.push_type, 'alert') IN ('alert', 'background', 'location', 'voip', 'complication',
                                               'fileprovider', 'mdm', 'pushtotalk', 'widgets')
       AND octet_length(NEW.payload::text) <= (CASE WHEN NEW.push_type = 'voip' THEN 5120 ELSE 4096 END)
       AND (NEW.apns_priority IS NULL
            OR (NEW.apns_priority IN (10, 5, 1) AND NOT (NEW.push_type = 'background' AND NEW.apns_priority = 10)))
       AND (NEW.collapse_id IS NULL OR octet_length(NEW.collapse_id) <= 64)
       AND NEW.send_at IS NOT NULL
       AND (NEW.expires_at IS NULL OR (NEW.expires_at > now() AND NEW.expires_at > NEW.send_at))
       AND (NEW.tokens IS NOT NULL)::int + (NEW.user_ids IS NOT NULL)::int + (NEW.tags IS NOT NULL)::int <= 1
       AND (NEW.tokens IS NULL
            OR (cardinality(NEW.tokens) = 1 AND array_ndims(NEW.tokens) = 1
                AND push.token_platform(NEW.tokens[array_lower(NEW.tokens, 1)], true, false) IS NOT NULL))
       AND (NEW.user_ids IS NULL OR (cardinality(NEW.user_ids) > 0 AND array_position(NEW.user_ids, NULL) IS NULL))
       AND (NEW.tags IS NULL OR (cardinality(NEW.tags) > 0 AND array_position(NEW.tags, NULL) IS NULL))
       AND NEW.priority IS NOT NULL
       AND NEW.state = 'queued' AND NEW.total IS NULL AND NEW.delivered = 0 AND NEW.failed = 0
       AND NEW.expired = 0 AND NEW.pruned = 0 AND NEW.answered = 0 AND NEW.bad_device_tokens = 0
       AND NOT NEW.prune_suppressed AND NEW.created_at = now() AND NEW.started_at IS NULL
       AND NEW.first_sent_at IS NULL AND NEW.finished_at IS NULL
    THEN
        NEW.push_type := coalesce(NEW.push_type, 'alert');
        NEW.apns_priority := coalesce(NEW.apns_priority, CASE WHEN NEW.push_type = 'background' THEN 5 ELSE 10 END);
        IF NEW.tokens IS NOT NULL THEN
            NEW.tokens := ARRAY[lower(NEW.tokens[array_lower(NEW.tokens, 1)])];
        END IF;
        RETURN NEW;
    END IF;
    -- fast path: end

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

    NEW.push_type := coalesce(NEW.push_type, CASE WHEN NEW.channel IS NOT NULL THEN 'liveactivity' ELSE 'alert' END);
    IF NEW.push_type NOT IN ('alert', 'background', 'location', 'voip', 'complication', 'fileprovider',
                             'mdm', 'liveactivity', 'pushtotalk', 'widgets') THEN
        RAISE EXCEPTION 'push_type % is not one of APNs'' push types (alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets)', quote_literal(NEW.push_type)
            USING ERRCODE = 'check_violation', COLUMN = 'push_type';
    END IF;

    live := NEW.push_type = 'liveactivity';
    IF NEW.activity_ids IS NOT NULL AND NOT live THEN
        RAISE EXCEPTION 'activity_ids is only for push_type ''liveactivity'', not %', quote_literal(NEW.push_type)
            USING ERRCODE = 'check_violation', COLUMN = 'activity_ids';
    END IF;
    IF NEW.activity_type IS NOT NULL AND NOT live THEN
        RAISE EXCEPTION 'activity_type is only for push_type ''liveactivity'', not %', quote_literal(NEW.push_type)
            USING ERRCODE = 'check_violation', COLUMN = 'activity_type';
    END IF;
    IF NEW.channel IS NOT NULL AND NOT live THEN
        RAISE EXCEPTION 'a channel broadcast is push_type ''liveactivity'', not %', quote_literal(NEW.push_type)
            USING ERRCODE = 'check_violation', COLUMN = 'push_type';
    END IF;
    NEW.channel_id := NULL;
    IF live THEN
        -- APNs takes Live Activity pushes over token authentication only.
        IF app.private_key_path IS NULL THEN
            RAISE EXCEPTION 'push_type liveactivity needs APNs token authentication (a .p8 key), and app % has %', NEW.app_id,
                CASE WHEN app.certificate_path IS NOT NULL THEN 'only a certificate, which APNs refuses for Live Activities'
                     ELSE 'no APNs credential' END
                USING ERRCODE = 'check_violation', COLUMN = 'push_type';
        END IF;
        IF NEW.fcm IS NOT NULL THEN
            RAISE EXCEPTION 'fcm is given, but Live Activities are iOS only'
                USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        END IF;
        -- No Android message: an Android device is never in a Live Activity's audience.
        has_fcm := false;
        aps := NEW.payload -> 'aps';
        IF jsonb_typeof(aps -> 'timestamp') IS DISTINCT FROM 'number' OR (aps ->> 'timestamp')::numeric <= 0
           OR (aps ->> 'timestamp')::numeric <> trunc((aps ->> 'timestamp')::numeric) THEN
            RAISE EXCEPTION 'payload aps.timestamp is required for push_type liveactivity: an integer, UNIX seconds'
                USING ERRCODE = 'check_violation', COLUMN = 'payload';
        END IF;
        event := CASE WHEN jsonb_typeof(aps -> 'event') = 'string' THEN aps ->> 'event' END;
        IF event IS NULL OR event NOT IN ('start', 'update', 'end') THEN
            RAISE EXCEPTION 'payload aps.event must be "start", "update" or "end" for push_type liveactivity'
                USING ERRCODE = 'check_violation', COLUMN = 'payload';
        END IF;
        IF event IN ('update', 'end') AND jsonb_typeof(aps -> 'content-state') IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'payload aps.content-state is required for event %: the activity''s dynamic state, an object', event
                USING ERRCODE = 'check_violation', COLUMN = 'payload';
        END IF;
        IF event = 'start' THEN
            IF jsonb_typeof(aps -> 'alert') IS NULL OR jsonb_typeof(aps -> 'alert') NOT IN ('object', 'string') THEN
                RAISE EXCEPTION 'payload aps.alert is required for event start'
                    USING ERRCODE = 'check_violation', COLUMN = 'payload';
            END IF;
            IF jsonb_typeof(aps -> 'attributes-type') IS DISTINCT FROM 'string' OR aps ->> 'attributes-type' = '' THEN
                RAISE EXCEPTION 'payload aps.attributes-type is required for event start: the ActivityAttributes type name'
                    USING ERRCODE = 'check_violation', COLUMN = 'payload';
            END IF;
            IF jsonb_typeof(aps -> 'attributes') IS DISTINCT FROM 'object' THEN
                RAISE EXCEPTION 'payload aps.attributes is required for event start: the activity''s static attributes, an object'
                    USING ERRCODE = 'check_violation', COLUMN = 'payload';
            END IF;
        END IF;
        IF NEW.activity_type IS NOT NULL THEN
            IF event <> 'start' THEN
                RAISE EXCEPTION 'activity_type selects push-to-start tokens, so aps.event must be "start", not %', quote_literal(event)
                    USING ERRCODE = 'check_violation', COLUMN = 'activity_type';
            END IF;
            IF aps ->> 'attributes-type' <> NEW.activity_type THEN
                RAISE EXCEPTION 'activity_type % does not match the payload''s aps.attributes-type %',
                    quote_literal(NEW.activity_type), quote_literal(aps ->> 'attributes-type')
                    USING ERRCODE = 'check_violation', COLUMN = 'activity_type';
            END IF;
        ELSIF event = 'start' AND NEW.tokens IS NULL AND NEW.channel IS NULL THEN
            RAISE EXCEPTION 'a start goes to push-to-start tokens: give activity_type (or explicit tokens)'
                USING ERRCODE = 'check_violation', COLUMN = 'activity_type';
        END IF;
        IF NEW.activity_ids IS NOT NULL AND event = 'start' THEN
            RAISE EXCEPTION 'activity_ids address running activities: a start goes to push-to-start tokens by activity_type'
                USING ERRCODE = 'check_violation', COLUMN = 'activity_ids';
        END IF;
        IF NEW.apns_priority IS NOT NULL AND NEW.apns_priority NOT IN (10, 5) AND NEW.channel IS NULL THEN
            RAISE EXCEPTION 'apns_priority % is not valid for push_type liveactivity: APNs accepts 5 or 10', NEW.apns_priority
                USING ERRCODE = 'check_violation', COLUMN = 'apns_priority';
        END IF;

        IF NEW.channel IS NOT NULL THEN
            IF NEW.tokens IS NOT NULL OR NEW.user_ids IS NOT NULL OR NEW.tags IS NOT NULL OR NEW.activity_ids IS NOT NULL
               OR NEW.activity_type IS NOT NULL THEN
                RAISE EXCEPTION 'a channel broadcast reaches the channel''s subscribers: give no tokens, user_ids, tags, activity_ids or activity_type'
                    USING ERRCODE = 'check_violation', COLUMN = 'channel';
            END IF;
            IF event = 'start' THEN
                RAISE EXCEPTION 'a channel broadcast updates or ends activities: aps.event "start" is not allowed'
                    USING ERRCODE = 'check_violation', COLUMN = 'payload';
            END IF;
            SELECT * INTO channel_row FROM push.channels c
             WHERE c.app_id = NEW.app_id AND c.name = NEW.channel AND c.state IN ('creating', 'active', 'deleting');
            IF NOT FOUND THEN
                RAISE EXCEPTION 'app % has no channel % (unknown, failed or deleted)', NEW.app_id, quote_literal(NEW.channel)
                    USING ERRCODE = 'check_violation', COLUMN = 'channel';
            END IF;
            IF channel_row.state <> 'active' THEN
                RAISE EXCEPTION 'channel % is not active (state %)%', quote_literal(NEW.channel), channel_row.state,
                    CASE WHEN channel_row.state = 'creating' THEN ': wait until push.channels shows it active' ELSE '' END
                    USING ERRCODE = 'check_violation', COLUMN = 'channel';
            END IF;
            IF channel_row.storage_policy = 0 AND NEW.expires_at IS NOT NULL THEN
                RAISE EXCEPTION 'expires_at is not allowed on channel %: it has storage_policy 0, so APNs stores nothing and takes no expiration',
                    quote_literal(NEW.channel)
                    USING ERRCODE = 'check_violation', COLUMN = 'expires_at';
            END IF;
            NEW.channel_id := channel_row.channel_id;
            -- A policy-1 channel stores the latest message up to 8 hours; without an expiry the job's message
            -- stays that long, and is not sent at all once it is older.
            IF channel_row.storage_policy = 1 AND NEW.expires_at IS NULL THEN
                NEW.expires_at := coalesce(NEW.send_at, now()) + interval '8 hours';
            END IF;
        END IF;
    END IF;
    NEW.audience_kind := CASE WHEN NOT live THEN 'device' WHEN NEW.activity_type IS NOT NULL THEN 'activity_start' ELSE 'activity' END;

    -- Measured on the exact bytes the worker sends: the jsonb's text form. A channel broadcast may carry 5 KB.
    limit_bytes := CASE WHEN NEW.push_type = 'voip' OR NEW.channel IS NOT NULL THEN 5120 ELSE 4096 END;
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

    audiences := (NEW.tokens IS NOT NULL)::int + (NEW.user_ids IS NOT NULL)::int + (NEW.tags IS NOT NULL)::int
                 + (NEW.activity_ids IS NOT NULL)::int;
    IF audiences > 1 THEN
        RAISE EXCEPTION 'give at most one audience: tokens, user_ids, tags or activity_ids'
            USING ERRCODE = 'check_violation', COLUMN = CASE WHEN NEW.activity_ids IS NOT NULL THEN 'activity_ids' ELSE 'tokens' END;
    END IF;
    IF NEW.activity_ids IS NOT NULL AND (cardinality(NEW.activity_ids) = 0 OR array_position(NEW.activity_ids, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'activity_ids must be a non-empty list without NULLs'
            USING ERRCODE = 'check_violation', COLUMN = 'activity_ids';
    END IF;
    IF NEW.tokens IS NOT NULL THEN
        IF cardinality(NEW.tokens) = 0 THEN
            RAISE EXCEPTION 'tokens is an empty list: the audience would be empty'
                USING ERRCODE = 'check_violation', COLUMN = 'tokens';
        END IF;
        IF cardinality(NEW.tokens) = 1 AND array_ndims(NEW.tokens) = 1 THEN
            -- One token, the transactional job: its platform by the same rule, without a statement to unnest,
            -- check, deduplicate and sort a list of one.
            one_token := NEW.tokens[array_lower(NEW.tokens, 1)];
            one_platform := push.token_platform(one_token, has_apns, has_fcm);
            invalid := one_platform IS NULL;
            bad_token := one_token;
        ELSE
            SELECT t INTO bad_token FROM unnest(NEW.tokens) AS t WHERE push.token_platform(t, has_apns, has_fcm) IS NULL LIMIT 1;
            invalid := FOUND;
        END IF;
        IF invalid THEN
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
        IF one_platform IS NOT NULL THEN
            NEW.tokens := ARRAY[CASE WHEN one_platform = 'ios' THEN lower(one_token) ELSE one_token END];
        ELSE
            NEW.tokens := ARRAY(SELECT DISTINCT CASE WHEN push.token_platform(t, has_apns, has_fcm) = 'ios' THEN lower(t) ELSE t END
                                  FROM unnest(NEW.tokens) AS t ORDER BY 1);
        END IF;
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
$function$;
