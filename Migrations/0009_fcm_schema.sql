-- Android devices on the same queue: FCM credentials beside (or instead of) APNs ones, a platform per device,
-- and the Android message of a job, given by the producer or derived from the APNs payload at enqueue.
-- Everything that worked before works unchanged: a device is 'ios' unless registered otherwise, and `fcm` is
-- optional.

-- Where an app's Firebase credential is, never the credential: the service-account JSON stays a file,
-- resolved like private_key_path (relative to --credentials-dir, confined to it).
ALTER TABLE push.apps
    ADD COLUMN fcm_project_id text
        CONSTRAINT apps_fcm_project_id_format CHECK (fcm_project_id ~ '^[a-z0-9][a-z0-9.:-]{0,127}$'),
    ADD COLUMN fcm_service_account_path text
        CONSTRAINT apps_fcm_service_account_path_not_empty CHECK (fcm_service_account_path <> ''),
    ADD CONSTRAINT apps_fcm_credential_complete
        CHECK ((fcm_project_id IS NULL) = (fcm_service_account_path IS NULL));

-- An Android-only app has no topic and no APNs credential. An app with APNs still has exactly one way to
-- authenticate, and a topic.
ALTER TABLE push.apps ALTER COLUMN topic DROP NOT NULL;
ALTER TABLE push.apps DROP CONSTRAINT apps_one_credential;
ALTER TABLE push.apps ADD CONSTRAINT apps_one_credential CHECK (
    (topic IS NOT NULL AND (
        (private_key_path IS NOT NULL AND team_id IS NOT NULL AND key_id IS NOT NULL AND certificate_path IS NULL)
        OR (certificate_path IS NOT NULL AND private_key_path IS NULL)))
    OR (topic IS NULL AND private_key_path IS NULL AND certificate_path IS NULL AND fcm_project_id IS NOT NULL)
);

-- FCM registration tokens are case-sensitive and not hex: letters, digits, '_', '-' and ':'. APNs tokens
-- stay lower-case hex.
ALTER TABLE push.devices
    ADD COLUMN platform text NOT NULL DEFAULT 'ios'
        CONSTRAINT devices_platform_valid CHECK (platform IN ('ios', 'android'));
ALTER TABLE push.devices DROP CONSTRAINT devices_token_format;
ALTER TABLE push.devices ADD CONSTRAINT devices_token_format CHECK (
    CASE platform WHEN 'ios' THEN token ~ '^[0-9a-f]{64,200}$' ELSE token ~ '^[A-Za-z0-9_:-]+$' AND length(token) BETWEEN 16 AND 1024 END);

ALTER TABLE push.jobs ADD COLUMN fcm jsonb;
ALTER TABLE push.deliveries ADD COLUMN platform text NOT NULL DEFAULT 'ios';

-- Which provider a token of an explicit list goes to, for an app with the given credentials; NULL when none
-- would take it. The list is not looked up in push.devices, so the form decides: an APNs token is 64 to 200
-- hex characters, an FCM registration token 16 to 1024 of FCM's alphabet. A hex token of an app with both
-- goes to APNs.
CREATE FUNCTION push.token_platform(token text, has_apns boolean, has_fcm boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$
    SELECT CASE WHEN has_apns AND token ~ '^[0-9A-Fa-f]{64,200}$' THEN 'ios'
                WHEN has_fcm AND token ~ '^[A-Za-z0-9_:-]+$' AND length(token) BETWEEN 16 AND 1024 THEN 'android' END
$$;

-- The Android message derived from an APNs payload, when the producer gives none (documented in the README):
--   aps.alert (a string)            → notification.body
--   aps.alert.title / .body         → notification.title / .body
--   aps.sound (a string), alert     → android.notification.sound
--   every other top-level key       → data, as strings (JSON text for non-strings)
--   push_type background, or no alert → a data-only message at NORMAL priority
--   apns_priority 10 / 5 or 1       → android.priority HIGH / NORMAL
--   collapse_id                     → android.collapse_key
-- A custom key FCM reserves (from, message_type, google.*, gcm.*) cannot become data: that is an error
-- naming the key, raised by push.validate_fcm_message.
CREATE FUNCTION push.fcm_from_apns(payload jsonb, push_type text, apns_priority integer, collapse_id text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog AS $$
DECLARE
    alert        jsonb := payload -> 'aps' -> 'alert';
    notification jsonb := '{}';
    android      jsonb := '{}';
    data         jsonb;
    message      jsonb := '{}';
BEGIN
    IF push_type IS DISTINCT FROM 'background' THEN
        IF jsonb_typeof(alert) = 'string' THEN
            notification := jsonb_build_object('body', alert #>> '{}');
        ELSIF jsonb_typeof(alert) = 'object' THEN
            IF jsonb_typeof(alert -> 'title') = 'string' THEN
                notification := notification || jsonb_build_object('title', alert ->> 'title');
            END IF;
            IF jsonb_typeof(alert -> 'body') = 'string' THEN
                notification := notification || jsonb_build_object('body', alert ->> 'body');
            END IF;
        END IF;
    END IF;
    IF notification <> '{}' THEN
        message := jsonb_build_object('notification', notification);
        IF jsonb_typeof(payload -> 'aps' -> 'sound') = 'string' THEN
            android := jsonb_build_object('notification', jsonb_build_object('sound', payload -> 'aps' ->> 'sound'));
        END IF;
        android := android || jsonb_build_object('priority', CASE WHEN coalesce(apns_priority, 10) = 10 THEN 'HIGH' ELSE 'NORMAL' END);
    ELSE
        android := jsonb_build_object('priority', 'NORMAL');
    END IF;
    IF collapse_id IS NOT NULL THEN
        android := android || jsonb_build_object('collapse_key', collapse_id);
    END IF;
    SELECT jsonb_object_agg(key, CASE WHEN jsonb_typeof(value) = 'string' THEN value #>> '{}' ELSE value::text END)
      INTO data
      FROM jsonb_each(payload) WHERE key <> 'aps';
    IF data IS NOT NULL THEN
        message := message || jsonb_build_object('data', data);
    END IF;
    RETURN message || jsonb_build_object('android', android);
END;
$$;

-- Checks an Android message (FCM's `message` without its target) and returns it normalised (priority in
-- upper case). Every error names the field, as `fcm.<path>`, and says what FCM accepts.
CREATE FUNCTION push.validate_fcm_message(message jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog AS $$
DECLARE
    key        text;
    value      jsonb;
    android    jsonb;
    ttl_text   text;
    ttl        numeric;
    size_bytes integer;
BEGIN
    IF jsonb_typeof(message) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'fcm must be a JSON object with notification, data and android'
            USING ERRCODE = 'check_violation', COLUMN = 'fcm';
    END IF;
    FOR key IN SELECT jsonb_object_keys(message) LOOP
        IF key IN ('token', 'topic', 'condition') THEN
            RAISE EXCEPTION 'fcm.% is not allowed: pgpush sets the target of every message itself', key
                USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        ELSIF key NOT IN ('notification', 'data', 'android') THEN
            RAISE EXCEPTION 'fcm.% is not supported: give notification, data and android', key
                USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        END IF;
    END LOOP;

    IF message ? 'notification' THEN
        IF jsonb_typeof(message -> 'notification') <> 'object' THEN
            RAISE EXCEPTION 'fcm.notification must be a JSON object' USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        END IF;
        FOR key, value IN SELECT * FROM jsonb_each(message -> 'notification') LOOP
            IF key NOT IN ('title', 'body', 'image') THEN
                RAISE EXCEPTION 'fcm.notification.% is not a notification field: give title, body and image', key
                    USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            ELSIF jsonb_typeof(value) <> 'string' THEN
                RAISE EXCEPTION 'fcm.notification.% must be a string', key USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            END IF;
        END LOOP;
    END IF;

    PERFORM push.validate_fcm_data(message -> 'data', 'fcm.data');

    android := message -> 'android';
    IF android IS NOT NULL THEN
        IF jsonb_typeof(android) <> 'object' THEN
            RAISE EXCEPTION 'fcm.android must be a JSON object' USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        END IF;
        FOR key IN SELECT jsonb_object_keys(android) LOOP
            IF key NOT IN ('collapse_key', 'priority', 'ttl', 'restricted_package_name', 'data', 'notification',
                           'direct_boot_ok', 'fcm_options') THEN
                RAISE EXCEPTION 'fcm.android.% is not an AndroidConfig field', key
                    USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            END IF;
        END LOOP;
        IF android ? 'priority' THEN
            IF jsonb_typeof(android -> 'priority') <> 'string' OR upper(android ->> 'priority') NOT IN ('NORMAL', 'HIGH') THEN
                RAISE EXCEPTION 'fcm.android.priority must be "NORMAL" or "HIGH"' USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            END IF;
            android := jsonb_set(android, '{priority}', to_jsonb(upper(android ->> 'priority')));
        END IF;
        IF android ? 'ttl' THEN
            ttl_text := android ->> 'ttl';
            IF jsonb_typeof(android -> 'ttl') <> 'string' OR ttl_text !~ '^[0-9]{1,9}(\.[0-9]{1,9})?s$' THEN
                RAISE EXCEPTION 'fcm.android.ttl must be a duration in seconds such as "3600s"'
                    USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            END IF;
            ttl := rtrim(ttl_text, 's')::numeric;
            IF ttl > 2419200 THEN
                RAISE EXCEPTION 'fcm.android.ttl % is over FCM''s maximum of 2419200s (4 weeks)', ttl_text
                    USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            END IF;
        END IF;
        FOR key IN SELECT k FROM unnest(ARRAY['collapse_key', 'restricted_package_name']) AS k LOOP
            IF android ? key AND jsonb_typeof(android -> key) <> 'string' THEN
                RAISE EXCEPTION 'fcm.android.% must be a string', key USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            END IF;
        END LOOP;
        IF android ? 'direct_boot_ok' AND jsonb_typeof(android -> 'direct_boot_ok') <> 'boolean' THEN
            RAISE EXCEPTION 'fcm.android.direct_boot_ok must be true or false' USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        END IF;
        IF android ? 'notification' AND jsonb_typeof(android -> 'notification') <> 'object' THEN
            RAISE EXCEPTION 'fcm.android.notification must be a JSON object' USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        END IF;
        IF android ? 'fcm_options' AND jsonb_typeof(android -> 'fcm_options') <> 'object' THEN
            RAISE EXCEPTION 'fcm.android.fcm_options must be a JSON object' USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        END IF;
        PERFORM push.validate_fcm_data(android -> 'data', 'fcm.android.data');
        message := jsonb_set(message, '{android}', android);
    END IF;

    -- FCM's limit for a message to a token counts its keys and values; the message's JSON text bounds that.
    size_bytes := octet_length(message::text);
    IF size_bytes > 4096 THEN
        RAISE EXCEPTION 'fcm is % bytes, over FCM''s 4096-byte limit for a message', size_bytes
            USING ERRCODE = 'check_violation', COLUMN = 'fcm';
    END IF;
    RETURN message;
END;
$$;

-- FCM data: a map of strings to strings, without the keys FCM reserves.
CREATE FUNCTION push.validate_fcm_data(data jsonb, field text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog AS $$
DECLARE
    key   text;
    value jsonb;
BEGIN
    IF data IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(data) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object of strings', field USING ERRCODE = 'check_violation', COLUMN = 'fcm';
    END IF;
    FOR key, value IN SELECT * FROM jsonb_each(data) LOOP
        IF key IN ('from', 'message_type') OR key LIKE 'google.%' OR key LIKE 'gcm.%' THEN
            RAISE EXCEPTION '%.% is a key FCM reserves (from, message_type, google.*, gcm.*)', field, key
                USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        ELSIF jsonb_typeof(value) <> 'string' THEN
            RAISE EXCEPTION '%.% must be a string: FCM data values are strings, not %s', field, key, jsonb_typeof(value)
                USING ERRCODE = 'check_violation', COLUMN = 'fcm';
        END IF;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION push.token_platform(text, boolean, boolean), push.fcm_from_apns(jsonb, text, integer, text),
                       push.validate_fcm_message(jsonb), push.validate_fcm_data(jsonb, text) FROM PUBLIC;

-- The job validation of 0002, for apps that may have APNs, FCM or both:
--   * the APNs payload (with its "aps" dictionary) is required only of an app with APNs; an Android-only app
--     may leave it out (stored as {});
--   * the Android message is kept only for an app with FCM: the producer's `fcm`, validated, or one derived
--     from the payload; `fcm` for an app without FCM is an error, not silently dropped;
--   * an explicit token list may hold FCM registration tokens; each must be of a platform the app has
--     (push.token_platform).
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

-- push.register_device as in 0008, with the device's platform. Positional and named calls written for the
-- old signature keep working: platform comes last and defaults to 'ios'.
DROP FUNCTION push.register_device(text, text, text, text[], text);
CREATE FUNCTION push.register_device(
    app_id   text,
    token    text,
    user_id  text DEFAULT NULL,
    tags     text[] DEFAULT '{}',
    replaces text DEFAULT NULL,
    platform text DEFAULT 'ios'
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    normalized text;
    rule       text;
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

    INSERT INTO push.devices AS d (app_id, token, user_id, tags, registered_at, platform)
    VALUES (register_device.app_id, normalized, register_device.user_id, register_device.tags, clock_timestamp(),
            register_device.platform)
    ON CONFLICT ON CONSTRAINT devices_pkey DO UPDATE
       SET user_id = EXCLUDED.user_id, tags = EXCLUDED.tags, registered_at = EXCLUDED.registered_at,
           platform = EXCLUDED.platform;

    IF register_device.replaces IS NOT NULL THEN
        DELETE FROM push.devices d
         WHERE d.app_id = register_device.app_id
           AND d.token = CASE WHEN register_device.platform = 'ios' THEN lower(register_device.replaces)
                              ELSE register_device.replaces END
           AND d.token <> normalized;
    END IF;
END;
$$;

-- push.enqueue as in 0008, with the Android message last (`fcm => …`). The payload may be left out for an
-- Android-only app.
DROP FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz, text, text, integer);
CREATE FUNCTION push.enqueue(
    app_id          text,
    payload         jsonb DEFAULT NULL,
    push_type       text DEFAULT 'alert',
    apns_priority   integer DEFAULT NULL,
    tokens          text[] DEFAULT NULL,
    user_ids        text[] DEFAULT NULL,
    tags            text[] DEFAULT NULL,
    send_at         timestamptz DEFAULT now(),
    expires_at      timestamptz DEFAULT NULL,
    collapse_id     text DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    priority        integer DEFAULT 0,
    fcm             jsonb DEFAULT NULL
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
                                expires_at, collapse_id, idempotency_key, priority, fcm)
    VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
            enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
            enqueue.idempotency_key, enqueue.priority, enqueue.fcm)
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

-- Outcomes per platform. The new column comes last: a view's existing columns keep their places.
CREATE OR REPLACE VIEW push.delivery_stats AS
SELECT (d.sent_at AT TIME ZONE 'UTC')::date AS day,
       d.app_id,
       d.status,
       d.reason,
       count(*) AS count,
       d.platform
  FROM push.deliveries d
 WHERE (SELECT push.granted_apps()) IS NULL OR d.app_id = ANY ((SELECT push.granted_apps())::text[])
 GROUP BY 1, 2, 3, 4, 6;
ALTER VIEW push.delivery_stats SET (security_barrier = true);

REVOKE ALL ON FUNCTION push.register_device(text, text, text, text[], text, text),
                       push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz,
                                    text, text, integer, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.register_device(text, text, text, text[], text, text),
                         push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz,
                                      text, text, integer, jsonb)
   TO pgpush_producer;
GRANT INSERT (fcm) ON push.jobs TO pgpush_producer;
-- Expansion sorts an explicit token list by platform.
GRANT EXECUTE ON FUNCTION push.token_platform(text, boolean, boolean) TO pgpush_worker;
