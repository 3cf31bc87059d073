-- Live Activities (../shared/LIVE_ACTIVITIES.md): activity tokens as devices of a kind, per-token updates and
-- starts, and APNs broadcast channels (iOS 18), where one request reaches every subscriber of an event.

-- An update token belongs to one running activity (`activity_id`, the producer's own key, e.g. 'order-123'); a
-- push-to-start token to one device and ActivityAttributes type (`activity_type`). Both look like device tokens,
-- so the kind is recorded when the app registers them, and an ordinary push never reaches them.
ALTER TABLE push.devices
    ADD COLUMN token_kind    text NOT NULL DEFAULT 'device',
    ADD COLUMN activity_id   text,
    ADD COLUMN activity_type text;
ALTER TABLE push.devices
    ADD CONSTRAINT devices_token_kind_valid CHECK (token_kind IN ('device', 'activity', 'activity_start')) NOT VALID,
    ADD CONSTRAINT devices_activity_fields CHECK (
        (token_kind = 'device' AND activity_id IS NULL AND activity_type IS NULL)
        OR (token_kind = 'activity' AND activity_id IS NOT NULL AND platform = 'ios')
        OR (token_kind = 'activity_start' AND activity_type IS NOT NULL AND activity_id IS NULL AND platform = 'ios')) NOT VALID;
-- Validated apart from the ALTER that adds them, so a large table is scanned without blocking writes.
ALTER TABLE push.devices VALIDATE CONSTRAINT devices_token_kind_valid;
ALTER TABLE push.devices VALIDATE CONSTRAINT devices_activity_fields;
-- One update token per activity: registering a new one replaces (rotates) the old.
CREATE UNIQUE INDEX devices_by_activity ON push.devices (app_id, activity_id) WHERE token_kind = 'activity';
CREATE INDEX devices_by_activity_type ON push.devices (app_id, activity_type) WHERE token_kind = 'activity_start';
-- The expiry of update tokens that were not registered again walks this.
CREATE INDEX devices_activity_age ON push.devices (registered_at) WHERE token_kind = 'activity';

-- Broadcast channels: a row per channel the producer asked for. A worker creates it on APNs' channel management
-- API and fills in `channel_id`; producers poll the row (or LISTEN on pgpush_channels) and hand the id to their
-- apps. `push.delete_channel` deletes it on APNs.
CREATE TABLE push.channels (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id          text NOT NULL REFERENCES push.apps (id) ON DELETE CASCADE,
    name            text NOT NULL,
    storage_policy  smallint NOT NULL CONSTRAINT channels_storage_policy_valid CHECK (storage_policy IN (0, 1)),
    -- APNs' id (base64, random, never reused); NULL until made.
    channel_id      text,
    state           text NOT NULL DEFAULT 'creating'
                    CONSTRAINT channels_state_valid CHECK (state IN ('creating', 'active', 'failed', 'deleting', 'deleted')),
    failure_reason  text,
    -- The management requests that failed in a row, and when the next one may be tried.
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- The worker whose request is in flight; another leaves the row alone until the lease runs out.
    leased_by       text,
    leased_until    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    active_at       timestamptz,
    deleted_at      timestamptz
);
-- A name is the producer's key while its channel lives; once deleted or failed it may be used again.
CREATE UNIQUE INDEX channels_live_name ON push.channels (app_id, name) WHERE state IN ('creating', 'active', 'deleting');
CREATE UNIQUE INDEX channels_by_channel_id ON push.channels (app_id, channel_id) WHERE channel_id IS NOT NULL;
CREATE INDEX channels_work ON push.channels (next_attempt_at) WHERE state IN ('creating', 'deleting');

-- Producers may LISTEN pgpush_channel_state instead of polling: every change of state is announced with the
-- app, the name, the new state and APNs' id.
CREATE FUNCTION push.notify_channel_state() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, push AS $$
BEGIN
    PERFORM pg_notify('pgpush_channel_state', json_build_object(
        'app_id', NEW.app_id, 'name', NEW.name, 'state', NEW.state, 'channel_id', NEW.channel_id)::text);
    RETURN NULL;
END;
$$;
CREATE TRIGGER channels_state_changed AFTER UPDATE OF state ON push.channels
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION push.notify_channel_state();

-- Tenancy as on the views: a login granted some apps sees only their channels. The functions below and the
-- worker read every row.
ALTER TABLE push.channels ENABLE ROW LEVEL SECURITY;
CREATE POLICY channels_granted ON push.channels FOR SELECT TO pgpush_producer, pgpush_reader
    USING ((SELECT push.granted_apps()) IS NULL OR app_id = ANY ((SELECT push.granted_apps())::text[]));
CREATE POLICY channels_worker ON push.channels FOR ALL TO pgpush_worker USING (true) WITH CHECK (true);

-- A job's audience in Live Activity terms. `audience_kind` is the kind of token it reaches, set by
-- push.validate_job: 'device' for every push type but liveactivity; 'activity' for updates (by `activity_ids`, or
-- the update tokens of a user, tag or app audience); 'activity_start' for starts (`activity_type`). A channel job
-- (`channel`, with APNs' id copied at enqueue into `channel_id`) has no token audience: it is one request.
ALTER TABLE push.jobs
    ADD COLUMN activity_ids  text[],
    ADD COLUMN activity_type text,
    ADD COLUMN channel       text,
    ADD COLUMN channel_id    text,
    ADD COLUMN audience_kind text NOT NULL DEFAULT 'device';
-- push.validate_job picks the push type when none is given: 'liveactivity' for a channel, else 'alert'.
ALTER TABLE push.jobs ALTER COLUMN push_type DROP DEFAULT;

-- Whether an explicitly listed token is in a job's audience. A token the app registered as an activity token
-- never gets an ordinary push; a start reaches only the push-to-start tokens of its type; an update to listed
-- tokens goes to them as given.
CREATE FUNCTION push.token_in_audience(app_id text, token text, audience_kind text, activity_type text)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, push AS $$
    SELECT CASE token_in_audience.audience_kind
           WHEN 'device' THEN NOT EXISTS (
               SELECT 1 FROM push.devices d
                WHERE d.app_id = token_in_audience.app_id AND d.token = token_in_audience.token AND d.token_kind <> 'device')
           WHEN 'activity_start' THEN EXISTS (
               SELECT 1 FROM push.devices d
                WHERE d.app_id = token_in_audience.app_id AND d.token = token_in_audience.token
                  AND d.token_kind = 'activity_start' AND d.activity_type = token_in_audience.activity_type)
           ELSE true END
$$;

-- push.register_device as in 0013, with the token's kind and its activity.
DROP FUNCTION push.register_device(text, text, text, text[], text, text);
CREATE FUNCTION push.register_device(
    app_id        text,
    token         text,
    user_id       text DEFAULT NULL,
    tags          text[] DEFAULT '{}',
    replaces      text DEFAULT NULL,
    platform      text DEFAULT 'ios',
    token_kind    text DEFAULT 'device',
    activity_id   text DEFAULT NULL,
    activity_type text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    normalized  text;
    rule        text;
    rotated_at  timestamptz;
BEGIN
    PERFORM push.check_app_granted(register_device.app_id);
    IF NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = register_device.app_id) THEN
        RAISE EXCEPTION 'unknown app_id: %', register_device.app_id
            USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    IF register_device.platform IS NULL OR register_device.platform NOT IN ('ios', 'android') THEN
        RAISE EXCEPTION 'platform must be ''ios'' or ''android'''
            USING ERRCODE = 'check_violation', COLUMN = 'platform';
    END IF;
    IF register_device.token_kind IS NULL OR register_device.token_kind NOT IN ('device', 'activity', 'activity_start') THEN
        RAISE EXCEPTION 'token_kind must be ''device'', ''activity'' (a Live Activity''s update token) or ''activity_start'' (a push-to-start token)'
            USING ERRCODE = 'check_violation', COLUMN = 'token_kind';
    END IF;
    IF register_device.token_kind <> 'device' AND register_device.platform <> 'ios' THEN
        RAISE EXCEPTION 'token_kind % is an iOS Live Activity token: platform must be ''ios''', quote_literal(register_device.token_kind)
            USING ERRCODE = 'check_violation', COLUMN = 'token_kind';
    END IF;
    IF register_device.token_kind = 'activity' AND coalesce(register_device.activity_id, '') = '' THEN
        RAISE EXCEPTION 'activity_id is required for token_kind ''activity'': the key of the running activity the update token belongs to'
            USING ERRCODE = 'check_violation', COLUMN = 'activity_id';
    END IF;
    IF register_device.token_kind = 'activity_start' AND coalesce(register_device.activity_type, '') = '' THEN
        RAISE EXCEPTION 'activity_type is required for token_kind ''activity_start'': the ActivityAttributes type the token starts'
            USING ERRCODE = 'check_violation', COLUMN = 'activity_type';
    END IF;
    IF register_device.activity_id IS NOT NULL AND register_device.token_kind <> 'activity' THEN
        RAISE EXCEPTION 'activity_id is only for token_kind ''activity'' (an update token), not %', quote_literal(register_device.token_kind)
            USING ERRCODE = 'check_violation', COLUMN = 'activity_id';
    END IF;
    IF register_device.activity_type IS NOT NULL AND register_device.token_kind = 'device' THEN
        RAISE EXCEPTION 'activity_type is only for Live Activity tokens (token_kind ''activity_start'' or ''activity'')'
            USING ERRCODE = 'check_violation', COLUMN = 'activity_type';
    END IF;
    IF length(register_device.activity_id) > 256 THEN
        RAISE EXCEPTION 'activity_id is % characters long: an activity id is at most 256 characters', length(register_device.activity_id)
            USING ERRCODE = 'check_violation', COLUMN = 'activity_id';
    END IF;
    IF length(register_device.activity_type) > 256 THEN
        RAISE EXCEPTION 'activity_type is % characters long: a type name is at most 256 characters', length(register_device.activity_type)
            USING ERRCODE = 'check_violation', COLUMN = 'activity_type';
    END IF;
    IF register_device.platform = 'ios' THEN
        rule := 'an APNs device token is 64 to 200 hex characters';
        IF register_device.token IS NULL OR register_device.token !~ '^[0-9A-Fa-f]{64,200}$' THEN
            RAISE EXCEPTION 'token is not a valid device token: %', rule USING ERRCODE = 'check_violation', COLUMN = 'token';
        END IF;
        IF register_device.replaces IS NOT NULL AND register_device.replaces !~ '^[0-9A-Fa-f]{64,200}$' THEN
            RAISE EXCEPTION 'replaces is not a valid device token: %', rule USING ERRCODE = 'check_violation', COLUMN = 'replaces';
        END IF;
        normalized := lower(register_device.token);
    ELSE
        rule := 'an FCM registration token is 16 to 1024 of A-Z, a-z, 0-9, ''_'', ''-'' and '':''';
        IF register_device.token IS NULL
           OR NOT (register_device.token ~ '^[A-Za-z0-9_:-]+$' AND length(register_device.token) BETWEEN 16 AND 1024) THEN
            RAISE EXCEPTION 'token is not a valid FCM registration token: %', rule USING ERRCODE = 'check_violation', COLUMN = 'token';
        END IF;
        IF register_device.replaces IS NOT NULL
           AND NOT (register_device.replaces ~ '^[A-Za-z0-9_:-]+$' AND length(register_device.replaces) BETWEEN 16 AND 1024) THEN
            RAISE EXCEPTION 'replaces is not a valid FCM registration token: %', rule USING ERRCODE = 'check_violation', COLUMN = 'replaces';
        END IF;
        normalized := register_device.token;
    END IF;
    IF register_device.tags IS NULL OR array_position(register_device.tags, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'tags must be a list without NULLs' USING ERRCODE = 'check_violation', COLUMN = 'tags';
    END IF;
    IF length(register_device.user_id) > 256 THEN
        RAISE EXCEPTION 'user_id is % characters long: a user id is at most 256 characters', length(register_device.user_id)
            USING ERRCODE = 'check_violation', COLUMN = 'user_id';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(register_device.tags) t WHERE length(t) > 256) THEN
        RAISE EXCEPTION 'tags holds a tag longer than 256 characters: a tag is at most 256 characters'
            USING ERRCODE = 'check_violation', COLUMN = 'tags';
    END IF;

    IF register_device.token_kind = 'activity' THEN
        -- A new update token for the same activity rotates it: the old one is gone, and the new one takes its
        -- place in the audience of a job already running, as `replaces` does.
        DELETE FROM push.devices d
         WHERE d.app_id = register_device.app_id AND d.token_kind = 'activity'
           AND d.activity_id = register_device.activity_id AND d.token <> normalized
        RETURNING d.created_at INTO rotated_at;
    END IF;

    INSERT INTO push.devices AS d (app_id, token, user_id, tags, registered_at, platform, token_kind, activity_id, activity_type)
    VALUES (register_device.app_id, normalized, register_device.user_id, register_device.tags, clock_timestamp(),
            register_device.platform, register_device.token_kind, register_device.activity_id, register_device.activity_type)
    ON CONFLICT ON CONSTRAINT devices_pkey DO UPDATE
       SET user_id = EXCLUDED.user_id, tags = EXCLUDED.tags, registered_at = EXCLUDED.registered_at,
           platform = EXCLUDED.platform, token_kind = EXCLUDED.token_kind, activity_id = EXCLUDED.activity_id,
           activity_type = EXCLUDED.activity_type,
           -- A token moved to the other platform or kind is a new device there: a running broadcast that
           -- already sent it as the old one must not send it again as the new one.
           created_at = CASE WHEN d.platform = EXCLUDED.platform AND d.token_kind = EXCLUDED.token_kind
                             THEN d.created_at ELSE EXCLUDED.created_at END;

    IF rotated_at IS NOT NULL THEN
        UPDATE push.devices n SET created_at = rotated_at
         WHERE n.app_id = register_device.app_id AND n.token = normalized
           AND n.created_at IS NOT NULL AND rotated_at < n.created_at;
    END IF;

    IF register_device.replaces IS NOT NULL THEN
        -- The new token is the same device under a new name: it keeps the replaced device's place in the
        -- audience of a job already running (push.jobs.audience_at), instead of counting as registered now.
        WITH replaced AS (
            DELETE FROM push.devices d
             WHERE d.app_id = register_device.app_id
               AND d.token = CASE WHEN register_device.platform = 'ios' THEN lower(register_device.replaces)
                                  ELSE register_device.replaces END
               AND d.token <> normalized
            RETURNING d.created_at, d.platform
        )
        UPDATE push.devices n SET created_at = replaced.created_at
          FROM replaced
         WHERE n.app_id = register_device.app_id AND n.token = normalized AND n.platform = replaced.platform
           AND n.created_at IS NOT NULL AND (replaced.created_at IS NULL OR replaced.created_at < n.created_at);
    END IF;
END;
$$;

-- Channels. Both functions check the app's grant and tell the workers at once (pgpush_channels); the workers
-- also look every second, so a NOTIFY lost behind a transaction-pooling PgBouncer only costs that second.
CREATE FUNCTION push.create_channel(app_id text, name text, storage_policy integer DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    app      push.apps%ROWTYPE;
    existing push.channels%ROWTYPE;
    made     bigint;
BEGIN
    PERFORM push.check_app_granted(create_channel.app_id);
    SELECT * INTO app FROM push.apps a WHERE a.id = create_channel.app_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown app_id: %', create_channel.app_id
            USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    IF app.private_key_path IS NULL THEN
        RAISE EXCEPTION 'app % has no APNs token authentication (a .p8 key): Live Activity broadcasts need it', create_channel.app_id
            USING ERRCODE = 'check_violation', COLUMN = 'app_id';
    END IF;
    IF coalesce(create_channel.name, '') = '' OR length(create_channel.name) > 256 THEN
        RAISE EXCEPTION 'name must be 1 to 256 characters: the key the channel is known by'
            USING ERRCODE = 'check_violation', COLUMN = 'name';
    END IF;
    IF create_channel.storage_policy IS NULL OR create_channel.storage_policy NOT IN (0, 1) THEN
        RAISE EXCEPTION 'storage_policy must be 0 (no message stored) or 1 (the latest message stored up to 8 hours)'
            USING ERRCODE = 'check_violation', COLUMN = 'storage_policy';
    END IF;

    SELECT * INTO existing FROM push.channels c
     WHERE c.app_id = create_channel.app_id AND c.name = create_channel.name AND c.state IN ('creating', 'active', 'deleting');
    IF FOUND THEN
        IF existing.state = 'deleting' THEN
            RAISE EXCEPTION 'channel % of app % is being deleted: create it again once push.channels shows it deleted',
                quote_literal(create_channel.name), create_channel.app_id
                USING ERRCODE = 'check_violation', COLUMN = 'name';
        END IF;
        IF existing.storage_policy <> create_channel.storage_policy THEN
            RAISE EXCEPTION 'channel % of app % exists with storage_policy %: a channel''s policy is fixed when it is made',
                quote_literal(create_channel.name), create_channel.app_id, existing.storage_policy
                USING ERRCODE = 'check_violation', COLUMN = 'storage_policy';
        END IF;
        -- The same request again (a producer's retry) is the same channel.
        RETURN existing.id;
    END IF;

    INSERT INTO push.channels AS c (app_id, name, storage_policy)
    VALUES (create_channel.app_id, create_channel.name, create_channel.storage_policy)
    RETURNING c.id INTO made;
    PERFORM pg_notify('pgpush_channels', '');
    RETURN made;
END;
$$;

CREATE FUNCTION push.delete_channel(app_id text, name text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    channel push.channels%ROWTYPE;
BEGIN
    PERFORM push.check_app_granted(delete_channel.app_id);
    SELECT * INTO channel FROM push.channels c
     WHERE c.app_id = delete_channel.app_id AND c.name = delete_channel.name AND c.state IN ('creating', 'active', 'deleting')
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'app % has no channel % (or it is already deleted)', delete_channel.app_id, quote_literal(delete_channel.name)
            USING ERRCODE = 'no_data_found', COLUMN = 'name';
    END IF;
    IF channel.state <> 'deleting' THEN
        UPDATE push.channels c
           SET state = 'deleting', attempts = 0, next_attempt_at = now(), failure_reason = NULL, updated_at = now()
         WHERE c.id = channel.id;
        PERFORM pg_notify('pgpush_channels', '');
    END IF;
    RETURN channel.id;
END;
$$;

-- push.enqueue as in 0009, with the Live Activity audiences and the channel last. The push type is chosen by
-- push.validate_job when it is not given.
DROP FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz, text, text, integer, jsonb);
CREATE FUNCTION push.enqueue(
    app_id          text,
    payload         jsonb DEFAULT NULL,
    push_type       text DEFAULT NULL,
    apns_priority   integer DEFAULT NULL,
    tokens          text[] DEFAULT NULL,
    user_ids        text[] DEFAULT NULL,
    tags            text[] DEFAULT NULL,
    send_at         timestamptz DEFAULT now(),
    expires_at      timestamptz DEFAULT NULL,
    collapse_id     text DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    priority        integer DEFAULT 0,
    fcm             jsonb DEFAULT NULL,
    activity_ids    text[] DEFAULT NULL,
    activity_type   text DEFAULT NULL,
    channel         text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    job_id bigint;
BEGIN
    IF enqueue.apns_priority IS NOT NULL AND enqueue.apns_priority NOT IN (10, 5, 1) THEN
        RAISE EXCEPTION 'apns_priority % is not valid: APNs accepts 10, 5 or 1', enqueue.apns_priority
            USING ERRCODE = 'check_violation', COLUMN = 'apns_priority';
    END IF;
    INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at,
                                expires_at, collapse_id, idempotency_key, priority, fcm, activity_ids, activity_type,
                                channel)
    VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
            enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
            enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
            enqueue.channel)
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
-- push.validate_job as in 0012 and 0016, with Live Activities: the payload rules of ActivityKit pushes, the
-- audience kind, and channel jobs.
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
$function$;

-- The estimate of a queued job's audience counts the kind of token it reaches; a channel job is one request.
-- The channel's name is the last column.
CREATE OR REPLACE VIEW push.job_progress AS
 SELECT j.id AS job_id,
    j.app_id,
    j.state,
    t.total,
    j.delivered,
    j.failed + j.expired AS failed,
    j.pruned,
        CASE
            WHEN j.state = ANY (ARRAY['queued'::text, 'running'::text]) THEN GREATEST(t.total - j.delivered - j.failed - j.expired, 0::bigint)
            ELSE 0::bigint
        END AS pending,
    j.created_at,
    j.started_at,
    j.finished_at,
    j.expired,
    j.priority,
    j.send_at,
    j.first_sent_at,
    j.failure_reason,
    t.total - t.android_total AS ios_total,
    j.delivered - j.android_delivered + p.unknown AS ios_delivered,
    j.failed + j.expired - j.android_failed + p.unknown AS ios_failed,
        CASE
            WHEN j.state = ANY (ARRAY['queued'::text, 'running'::text]) THEN GREATEST(t.total - t.android_total - (j.delivered - j.android_delivered) - (j.failed + j.expired - j.android_failed), 0::bigint)
            ELSE 0::bigint
        END + p.unknown AS ios_pending,
    t.android_total,
    j.android_delivered + p.unknown AS android_delivered,
    j.android_failed + p.unknown AS android_failed,
        CASE
            WHEN j.state = ANY (ARRAY['queued'::text, 'running'::text]) THEN GREATEST(t.android_total - j.android_delivered - j.android_failed, 0::bigint)
            ELSE 0::bigint
        END + p.unknown AS android_pending,
    j.audience_at,
    j.removed_before_send,
    j.added_before_send,
    j.cancelled_tokens,
    j.channel
   FROM push.jobs j
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN j.total IS NOT NULL THEN NULL::bigint[]
                    WHEN j.channel IS NOT NULL THEN ARRAY[1, 0]::bigint[]
                    WHEN j.activity_ids IS NOT NULL THEN ( SELECT ARRAY[count(*), 0::bigint] AS "array"
                       FROM push.devices d
                      WHERE d.app_id = j.app_id AND d.token_kind = 'activity'::text AND (d.activity_id = ANY (j.activity_ids)))
                    WHEN j.tokens IS NOT NULL THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE a.fcm_project_id IS NOT NULL AND NOT (x.x ~ '^[0-9A-Fa-f]{64,200}$'::text AND (a.private_key_path IS NOT NULL OR a.certificate_path IS NOT NULL)))] AS "array"
                       FROM unnest(j.tokens) x(x),
                        push.apps a
                      WHERE a.id = j.app_id)
                    WHEN j.user_ids IS NOT NULL THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android'::text)] AS "array"
                       FROM push.devices d
                      WHERE d.app_id = j.app_id AND (d.user_id = ANY (j.user_ids)) AND d.token_kind = j.audience_kind
                        AND (j.activity_type IS NULL OR d.activity_type = j.activity_type))
                    WHEN j.tags IS NOT NULL THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android'::text)] AS "array"
                       FROM push.devices d
                      WHERE d.app_id = j.app_id AND d.tags && j.tags AND d.token_kind = j.audience_kind
                        AND (j.activity_type IS NULL OR d.activity_type = j.activity_type))
                    ELSE ( SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android'::text)] AS "array"
                       FROM push.devices d
                      WHERE d.app_id = j.app_id AND d.token_kind = j.audience_kind
                        AND (j.activity_type IS NULL OR d.activity_type = j.activity_type))
                END AS audience) c
     CROSS JOIN LATERAL ( SELECT COALESCE(j.total, c.audience[1]) AS total,
                CASE
                    WHEN j.total IS NULL THEN c.audience[2]
                    ELSE j.android_total
                END AS android_total) t
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN t.android_total IS NULL THEN NULL::bigint
                    ELSE 0::bigint
                END AS unknown) p
  WHERE (( SELECT push.granted_apps() AS granted_apps)) IS NULL OR (j.app_id = ANY ((( SELECT push.granted_apps() AS granted_apps))::text[]));

REVOKE ALL ON FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text),
                       push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz,
                                    text, text, integer, jsonb, text[], text, text),
                       push.create_channel(text, text, integer), push.delete_channel(text, text),
                       push.token_in_audience(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text),
                         push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz,
                                      text, text, integer, jsonb, text[], text, text),
                         push.create_channel(text, text, integer), push.delete_channel(text, text)
   TO pgpush_producer;
GRANT INSERT (activity_ids, activity_type, channel) ON push.jobs TO pgpush_producer;
GRANT SELECT ON push.channels TO pgpush_producer, pgpush_reader;
-- Workers make and delete the channels, and read the audience of explicit token lists.
GRANT SELECT, UPDATE ON push.channels TO pgpush_worker;
GRANT EXECUTE ON FUNCTION push.token_in_audience(text, text, text, text) TO pgpush_worker;
