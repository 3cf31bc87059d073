-- Each device its own message: locale variants, per-device badge counters, and opens.
--
-- * push.devices gains `locale` (a lowercase BCP 47 tag) and `badge` (the device's counter).
-- * push.enqueue(..., localized => {locale: partial payload}, badge => 'increment'). The trigger
--   jobs_validate_content resolves each variant at enqueue (a JSON Merge Patch, RFC 7386, over the job's APNs
--   payload and its Android message), checks it like the payload itself, and stores the result in
--   push.jobs.variants for the workers.
-- * A badge step is recorded once per (job, device) in push.badge_steps, in the statement that moves the
--   counter, so a retry or a re-send after a crash sends the same number and never moves it twice.
-- * push.record_open and push.opens keep one open per (job, device); push.job_engagement reports open rates.

ALTER TABLE push.devices
    ADD COLUMN locale text CONSTRAINT devices_locale_form CHECK (locale ~ '^[a-z]{2,3}(-[a-z0-9]{1,8})*$' AND length(locale) <= 35),
    ADD COLUMN badge integer NOT NULL DEFAULT 0 CONSTRAINT devices_badge_range CHECK (badge >= 0);

-- The token's form is checked on every write of a device row, and a badge increment writes every device it
-- reaches. The bounded repetition of '^[0-9a-f]{64,200}$' cost PostgreSQL's regex engine about 37 µs a row (a
-- 1,000-device chunk's counters took 50 ms); a length test and an unbounded class state the same rule for 1 µs.
ALTER TABLE push.devices DROP CONSTRAINT devices_token_format,
    ADD CONSTRAINT devices_token_format CHECK (
        CASE platform
            WHEN 'ios' THEN length(token) BETWEEN 64 AND 200 AND token ~ '^[0-9a-f]+$'
            ELSE length(token) BETWEEN 16 AND 1024 AND token ~ '^[A-Za-z0-9_:-]+$'
        END) NOT VALID;
ALTER TABLE push.devices VALIDATE CONSTRAINT devices_token_format;

ALTER TABLE push.jobs
    ADD COLUMN localized jsonb,
    ADD COLUMN badge text CONSTRAINT jobs_badge_mode CHECK (badge = 'increment'),
    ADD COLUMN variants jsonb;

-- A device's locale as pgpush keeps it: lowercase, subtags joined by '-' ('fr_CA' and 'fr-CA' are 'fr-ca'),
-- or NULL when the text is not a BCP 47 language tag (a 2-3 letter language, then subtags of 1-8 letters or
-- digits: script, region, variants).
CREATE FUNCTION push.normalize_locale(tag text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog
AS $$
    SELECT CASE WHEN n ~ '^[a-z]{2,3}(-[a-z0-9]{1,8})*$' AND length(n) <= 35 THEN n END
      FROM (SELECT replace(lower(btrim(tag)), '_', '-') AS n) AS t
$$;

-- RFC 7386 JSON Merge Patch: objects merge key by key, recursively; a null removes a key; anything else
-- replaces. A variant that overrides only aps.alert keeps the job's aps.sound.
CREATE FUNCTION push.merge_patch(target jsonb, patch jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog
AS $$
DECLARE
    key    text;
    value  jsonb;
    merged jsonb;
BEGIN
    IF jsonb_typeof(patch) IS DISTINCT FROM 'object' THEN
        RETURN patch;
    END IF;
    merged := CASE WHEN jsonb_typeof(target) = 'object' THEN target ELSE '{}'::jsonb END;
    FOR key, value IN SELECT * FROM jsonb_each(patch) LOOP
        IF jsonb_typeof(value) = 'null' THEN
            merged := merged - key;
        ELSE
            merged := jsonb_set(merged, ARRAY[key], push.merge_patch(merged -> key, value));
        END IF;
    END LOOP;
    RETURN merged;
END;
$$;

-- The badge's place in a message, marked with a number no counter reaches, so a worker writes each device's
-- counter into the bytes without parsing them (PersonalBody in PGPushCore). Its width bounds every counter's,
-- so a size measured with it holds for every device.
CREATE FUNCTION push.badge_sentinel() RETURNS jsonb
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog
AS $$ SELECT '-2147483649'::jsonb $$;

-- The APNs payload with the badge's place marked (aps.badge).
CREATE FUNCTION push.apns_with_badge(payload jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, push
AS $$ SELECT jsonb_set(payload, '{aps,badge}', push.badge_sentinel()) $$;

-- The Android message with the badge's place marked (android.notification.notification_count), for a message
-- that shows a notification; a data-only message has no count to show and is unchanged.
CREATE FUNCTION push.fcm_with_badge(message jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, push
AS $$
    SELECT CASE WHEN message ? 'notification' OR message -> 'android' ? 'notification'
                THEN push.merge_patch(message, jsonb_build_object('android', jsonb_build_object('notification',
                         jsonb_build_object('notification_count', push.badge_sentinel()))))
                ELSE message END
$$;

-- The Android message as a worker sends it: it names its job in fcm_options.analytics_label, so Firebase's
-- own reports line up with push.deliveries, when that still fits FCM's 4,096 bytes.
CREATE FUNCTION push.fcm_for_send(message jsonb, job_id bigint) RETURNS jsonb
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, push
AS $$
    SELECT CASE WHEN message IS NULL OR message ? 'fcm_options' OR octet_length(message::text) > 4096 - 64 THEN message
                ELSE message || jsonb_build_object('fcm_options', jsonb_build_object('analytics_label', 'pgpush-job-' || job_id))
           END
$$;

-- What a worker sends to one platform for a job with per-device content, as pairs of (locale, body text):
-- '' is the job's own message, then one per variant. Bodies carry the badge's place when the job increments it.
CREATE FUNCTION push.personal_bodies(payload jsonb, fcm jsonb, variants jsonb, badge text, platform text, job_id bigint)
    RETURNS text[]
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, push
AS $$
    SELECT array_agg(p.x ORDER BY m.ord, m.locale, p.part)
      FROM (SELECT '' AS locale, payload AS apns, fcm AS android, 0 AS ord
            UNION ALL
            SELECT v.key, v.value -> 'apns', v.value -> 'fcm', 1 FROM jsonb_each(coalesce(variants, '{}')) AS v) AS m
      CROSS JOIN LATERAL (VALUES
          (1, m.locale),
          (2, CASE WHEN platform = 'android'
                   THEN push.fcm_for_send(CASE WHEN badge = 'increment' THEN push.fcm_with_badge(m.android) ELSE m.android END, job_id)::text
                   ELSE (CASE WHEN badge = 'increment' THEN push.apns_with_badge(m.apns) ELSE m.apns END)::text END)
      ) AS p(part, x)
     WHERE (platform = 'android' AND m.android IS NOT NULL) OR (platform <> 'android' AND m.apns IS NOT NULL)
$$;

-- Checks and resolves a job's per-device content after push.validate_job has checked the rest (it runs for
-- jobs with `localized` or `badge` only; see the trigger's WHEN). Each variant is merged over the job's APNs
-- payload and its Android message and must pass what the job's own message passes, with the variant named.
CREATE FUNCTION push.validate_job_content() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
DECLARE
    app          push.apps%ROWTYPE;
    has_apns     boolean;
    has_fcm      boolean;
    derived      boolean;
    live         boolean;
    limit_bytes  integer;
    size_bytes   integer;
    key          text;
    variant      jsonb;
    locale       text;
    apns         jsonb;
    android      jsonb;
    given        jsonb := '{}';
    resolved     jsonb := '{}';
    field        text;
    problem      text;
BEGIN
    NEW.variants := NULL;
    IF NEW.badge IS NOT NULL AND NEW.badge <> 'increment' THEN
        RAISE EXCEPTION 'badge % is not valid: give ''increment'' (each device''s own counter, plus one) or leave it out',
            quote_literal(left(NEW.badge, 40))
            USING ERRCODE = 'check_violation', COLUMN = 'badge';
    END IF;
    IF NEW.localized IS NOT NULL AND jsonb_typeof(NEW.localized) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'localized must be a JSON object from locale to partial payload, such as {"fr": {"aps": {"alert": "Bonjour"}}}'
            USING ERRCODE = 'check_violation', COLUMN = 'localized';
    END IF;
    IF NEW.localized = '{}' THEN
        NEW.localized := NULL;
    END IF;
    IF NEW.channel IS NOT NULL AND (NEW.localized IS NOT NULL OR NEW.badge IS NOT NULL) THEN
        RAISE EXCEPTION 'a channel broadcast is one message to every subscriber: % cannot differ per device',
            CASE WHEN NEW.localized IS NOT NULL THEN 'localized' ELSE 'badge' END
            USING ERRCODE = 'check_violation', COLUMN = CASE WHEN NEW.localized IS NOT NULL THEN 'localized' ELSE 'badge' END;
    END IF;
    live := NEW.push_type = 'liveactivity';
    IF live AND NEW.badge IS NOT NULL THEN
        RAISE EXCEPTION 'badge is not for push_type liveactivity: a Live Activity has no badge'
            USING ERRCODE = 'check_violation', COLUMN = 'badge';
    END IF;

    SELECT * INTO app FROM push.apps a WHERE a.id = NEW.app_id;
    has_apns := app.private_key_path IS NOT NULL OR app.certificate_path IS NOT NULL;
    has_fcm := app.fcm_project_id IS NOT NULL AND NEW.fcm IS NOT NULL AND NOT live;
    limit_bytes := CASE WHEN NEW.push_type = 'voip' THEN 5120 ELSE 4096 END;

    IF NEW.badge IS NOT NULL THEN
        IF has_apns THEN
            size_bytes := octet_length(push.apns_with_badge(NEW.payload)::text);
            IF size_bytes > limit_bytes THEN
                RAISE EXCEPTION 'payload is % bytes with a badge counter in it, over APNs'' %-byte limit', size_bytes, limit_bytes
                    USING ERRCODE = 'check_violation', COLUMN = 'payload';
            END IF;
        END IF;
        IF has_fcm THEN
            size_bytes := octet_length(push.fcm_with_badge(NEW.fcm)::text);
            IF size_bytes > 4096 THEN
                RAISE EXCEPTION 'fcm is % bytes with a badge counter in it, over FCM''s 4096-byte limit for a message', size_bytes
                    USING ERRCODE = 'check_violation', COLUMN = 'fcm';
            END IF;
        END IF;
    END IF;

    IF NEW.localized IS NULL THEN
        RETURN NEW;
    END IF;
    -- The job's Android message was derived from its APNs payload when it equals what that gives: a variant's
    -- is then derived from the variant's payload, so a variant that changes aps.alert changes Android's too.
    derived := has_fcm AND NEW.fcm = push.validate_fcm_message(
        push.fcm_from_apns(NEW.payload, NEW.push_type, NEW.apns_priority, NEW.collapse_id));
    FOR key, variant IN SELECT e.key, e.value FROM jsonb_each(NEW.localized) AS e ORDER BY e.key LOOP
        locale := push.normalize_locale(key);
        IF locale IS NULL THEN
            RAISE EXCEPTION 'localized key % is not a locale: give BCP 47 tags such as "fr" or "fr-CA"', quote_literal(left(key, 40))
                USING ERRCODE = 'check_violation', COLUMN = 'localized';
        END IF;
        IF given ? locale THEN
            RAISE EXCEPTION 'localized has two variants for locale "%" (keys are compared in lowercase)', locale
                USING ERRCODE = 'check_violation', COLUMN = 'localized';
        END IF;
        IF jsonb_typeof(variant) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'localized."%" must be a JSON object: a partial payload (aps and custom keys) and fcm', key
                USING ERRCODE = 'check_violation', COLUMN = 'localized';
        END IF;
        IF variant ? 'web' THEN
            RAISE EXCEPTION 'localized."%".web is a Web Push message, and app % has no Web Push', key, NEW.app_id
                USING ERRCODE = 'check_violation', COLUMN = 'localized';
        END IF;
        given := given || jsonb_build_object(locale, variant);

        apns := NULL;
        IF has_apns THEN
            apns := push.merge_patch(NEW.payload, variant - 'fcm');
            IF jsonb_typeof(apns -> 'aps') IS DISTINCT FROM 'object' THEN
                RAISE EXCEPTION 'localized."%": the merged payload has no "aps" dictionary', key
                    USING ERRCODE = 'check_violation', COLUMN = 'localized';
            END IF;
            IF live THEN
                -- What makes the push the activity's start, update or end is the job's, not a language's.
                SELECT f INTO field FROM unnest(ARRAY['event', 'timestamp', 'attributes-type', 'attributes',
                                                      'dismissal-date', 'stale-date', 'input-push-token',
                                                      'input-push-channel']) AS f
                 WHERE (apns -> 'aps' -> f) IS DISTINCT FROM (NEW.payload -> 'aps' -> f) LIMIT 1;
                IF FOUND THEN
                    RAISE EXCEPTION 'localized."%".aps.% differs from the job''s: a Live Activity''s % is the same in every language', key, field, field
                        USING ERRCODE = 'check_violation', COLUMN = 'localized';
                END IF;
            END IF;
            size_bytes := octet_length((CASE WHEN NEW.badge IS NOT NULL THEN push.apns_with_badge(apns) ELSE apns END)::text);
            IF size_bytes > limit_bytes THEN
                RAISE EXCEPTION 'localized."%": the merged payload is % bytes, over APNs'' %-byte limit', key, size_bytes, limit_bytes
                    USING ERRCODE = 'check_violation', COLUMN = 'localized';
            END IF;
        ELSIF (variant - 'fcm') <> '{}' AND NOT has_fcm THEN
            RAISE EXCEPTION 'localized."%" overrides the APNs payload, and app % has no APNs credentials', key, NEW.app_id
                USING ERRCODE = 'check_violation', COLUMN = 'localized';
        END IF;

        android := NULL;
        IF variant ? 'fcm' AND NOT has_fcm THEN
            RAISE EXCEPTION 'localized."%".fcm is given, but the job has no Android message (app % has no FCM credentials%)', key, NEW.app_id,
                CASE WHEN live THEN ', or it is a Live Activity' ELSE '' END
                USING ERRCODE = 'check_violation', COLUMN = 'localized';
        END IF;
        IF has_fcm THEN
            BEGIN
                android := CASE WHEN derived
                                THEN push.fcm_from_apns(push.merge_patch(NEW.payload, variant - 'fcm'), NEW.push_type,
                                                        NEW.apns_priority, NEW.collapse_id)
                                ELSE NEW.fcm END;
                IF variant ? 'fcm' THEN
                    android := push.merge_patch(android, variant -> 'fcm');
                END IF;
                android := push.validate_fcm_message(android);
            EXCEPTION WHEN check_violation THEN
                GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
                RAISE EXCEPTION 'localized."%": %', key, problem USING ERRCODE = 'check_violation', COLUMN = 'localized';
            END;
            IF NEW.badge IS NOT NULL THEN
                size_bytes := octet_length(push.fcm_with_badge(android)::text);
                IF size_bytes > 4096 THEN
                    RAISE EXCEPTION 'localized."%": the Android message is % bytes with a badge counter in it, over FCM''s 4096-byte limit', key, size_bytes
                        USING ERRCODE = 'check_violation', COLUMN = 'localized';
                END IF;
            END IF;
        END IF;
        resolved := resolved || jsonb_build_object(locale,
            CASE WHEN apns IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('apns', apns) END
            || CASE WHEN android IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('fcm', android) END);
    END LOOP;
    NEW.localized := given;
    NEW.variants := resolved;
    RETURN NEW;
END;
$$;

-- After jobs_validate (triggers fire in name order), which has checked the payload and set the Android message.
CREATE TRIGGER jobs_validate_content BEFORE INSERT ON push.jobs FOR EACH ROW
    WHEN (NEW.localized IS NOT NULL OR NEW.badge IS NOT NULL OR NEW.variants IS NOT NULL)
    EXECUTE FUNCTION push.validate_job_content();

DROP FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz, text, text,
                           integer, jsonb, text[], text, text);
DROP FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text);

-- One row per (job, device) whose badge counter the job moved, with the number it moved it to: a retry or a
-- re-send after a crash finds its row and sends that number again, and moves nothing. Its key decides who
-- moves a counter: only the statement whose insert of (job, token) went in moves it. Rows of ended jobs are
-- removed by maintenance (push.remove_badge_steps).
CREATE TABLE push.badge_steps (
    job_id bigint NOT NULL,
    token  text NOT NULL,
    badge  integer NOT NULL,
    PRIMARY KEY (job_id, token)
);

-- Opens reported by the apps: one per (job, device).
CREATE TABLE push.opens (
    job_id      bigint NOT NULL REFERENCES push.jobs (id) ON DELETE CASCADE,
    app_id      text NOT NULL,
    token       text NOT NULL,
    platform    text NOT NULL,
    opened_at   timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, token)
);
CREATE INDEX opens_by_app ON push.opens (app_id, opened_at);

-- record_open by apns_id finds the delivery it names.
CREATE INDEX deliveries_by_apns_id ON push.deliveries (apns_id);
CREATE FUNCTION push.enqueue(app_id text, payload jsonb DEFAULT NULL::jsonb, push_type text DEFAULT NULL::text, apns_priority integer DEFAULT NULL::integer, tokens text[] DEFAULT NULL::text[], user_ids text[] DEFAULT NULL::text[], tags text[] DEFAULT NULL::text[], send_at timestamp with time zone DEFAULT now(), expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, collapse_id text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, priority integer DEFAULT 0, fcm jsonb DEFAULT NULL::jsonb, activity_ids text[] DEFAULT NULL::text[], activity_type text DEFAULT NULL::text, channel text DEFAULT NULL::text, localized jsonb DEFAULT NULL::jsonb, badge text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'push'
AS $function$
#variable_conflict use_column
DECLARE
    job_id bigint;
BEGIN
    IF enqueue.apns_priority IS NOT NULL AND enqueue.apns_priority NOT IN (10, 5, 1) THEN
        RAISE EXCEPTION 'apns_priority % is not valid: APNs accepts 10, 5 or 1', enqueue.apns_priority
            USING ERRCODE = 'check_violation', COLUMN = 'apns_priority';
    END IF;
    IF enqueue.idempotency_key IS NULL THEN
        INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at,
                                    expires_at, collapse_id, idempotency_key, priority, fcm, activity_ids, activity_type,
                                    channel, localized, badge)
        VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
                enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
                enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
                enqueue.channel, enqueue.localized, enqueue.badge)
        RETURNING j.id INTO job_id;
        RETURN job_id;
    END IF;

    INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at,
                                expires_at, collapse_id, idempotency_key, priority, fcm, activity_ids, activity_type,
                                channel, localized, badge)
    VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
            enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
            enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
            enqueue.channel, enqueue.localized, enqueue.badge)
    ON CONFLICT (app_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO job_id;

    IF job_id IS NULL THEN
        -- The key was used before (or by a concurrent producer that has now committed): same broadcast.
        SELECT j.id INTO job_id FROM push.jobs j
         WHERE j.app_id = enqueue.app_id AND j.idempotency_key = enqueue.idempotency_key;
    END IF;
    RETURN job_id;
END;
$function$;
CREATE FUNCTION push.register_device(app_id text, token text, user_id text DEFAULT NULL::text, tags text[] DEFAULT '{}'::text[], replaces text DEFAULT NULL::text, platform text DEFAULT 'ios'::text, token_kind text DEFAULT 'device'::text, activity_id text DEFAULT NULL::text, activity_type text DEFAULT NULL::text, locale text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'push'
AS $function$
#variable_conflict use_column
DECLARE
    normalized  text;
    rule        text;
    rotated_at  timestamptz;
    rotated_locale text;
    language    text;
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

    IF register_device.locale IS NOT NULL THEN
        language := push.normalize_locale(register_device.locale);
        IF language IS NULL THEN
            RAISE EXCEPTION 'locale % is not a BCP 47 language tag such as ''fr'', ''fr-CA'' or ''zh-Hant-TW''',
                quote_literal(left(register_device.locale, 40))
                USING ERRCODE = 'check_violation', COLUMN = 'locale';
        END IF;
    END IF;

    IF register_device.token_kind = 'activity' THEN
        -- A new update token for the same activity rotates it: the old one is gone, and the new one takes its
        -- place in the audience of a job already running, as `replaces` does.
        DELETE FROM push.devices d
         WHERE d.app_id = register_device.app_id AND d.token_kind = 'activity'
           AND d.activity_id = register_device.activity_id AND d.token <> normalized
        RETURNING d.created_at, d.locale INTO rotated_at, rotated_locale;
    END IF;

    INSERT INTO push.devices AS d (app_id, token, user_id, tags, registered_at, platform, token_kind, activity_id, activity_type,
                                   locale)
    VALUES (register_device.app_id, normalized, register_device.user_id, register_device.tags, clock_timestamp(),
            register_device.platform, register_device.token_kind, register_device.activity_id, register_device.activity_type,
            -- A rotated activity token is the same activity: it keeps its locale unless one is given.
            coalesce(language, rotated_locale))
    ON CONFLICT ON CONSTRAINT devices_pkey DO UPDATE
       SET user_id = EXCLUDED.user_id, tags = EXCLUDED.tags, registered_at = EXCLUDED.registered_at,
           -- A registration without a locale keeps the one the device has; the badge counter is always kept.
           locale = coalesce(EXCLUDED.locale, d.locale),
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
            RETURNING d.created_at, d.platform, d.badge, d.locale
        )
        UPDATE push.devices n
           SET created_at = CASE WHEN n.created_at IS NOT NULL
                                      AND (replaced.created_at IS NULL OR replaced.created_at < n.created_at)
                                 THEN replaced.created_at ELSE n.created_at END,
               -- The same device under a new name keeps its badge counter, and its locale unless one was given.
               badge = greatest(n.badge, replaced.badge),
               locale = coalesce(n.locale, replaced.locale)
          FROM replaced
         WHERE n.app_id = register_device.app_id AND n.token = normalized AND n.platform = replaced.platform;
    END IF;
END;
$function$;

-- Sets devices' badge counters, by token or for every device of a user: what the app calls when it opens
-- (value 0 clears the badge). Returns how many devices it set.
CREATE FUNCTION push.set_badge(app_id text, token text DEFAULT NULL, user_id text DEFAULT NULL, value integer DEFAULT 0)
    RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
#variable_conflict use_column
DECLARE
    changed integer;
BEGIN
    PERFORM push.check_app_granted(set_badge.app_id);
    IF NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = set_badge.app_id) THEN
        RAISE EXCEPTION 'unknown app_id: %', set_badge.app_id USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    IF (set_badge.token IS NULL) = (set_badge.user_id IS NULL) THEN
        RAISE EXCEPTION 'give either token or user_id' USING ERRCODE = 'check_violation',
            COLUMN = CASE WHEN set_badge.token IS NULL THEN 'token' ELSE 'user_id' END;
    END IF;
    IF set_badge.value IS NULL OR set_badge.value < 0 THEN
        RAISE EXCEPTION 'value must be 0 or more, not %', coalesce(set_badge.value::text, 'NULL')
            USING ERRCODE = 'check_violation', COLUMN = 'value';
    END IF;
    UPDATE push.devices d SET badge = set_badge.value
     WHERE d.app_id = set_badge.app_id
       AND CASE WHEN set_badge.token IS NOT NULL
                THEN d.token = CASE WHEN set_badge.token ~ '^[0-9A-Fa-f]{64,200}$' THEN lower(set_badge.token) ELSE set_badge.token END
                ELSE d.user_id = set_badge.user_id END;
    GET DIAGNOSTICS changed = ROW_COUNT;
    IF changed = 0 AND set_badge.token IS NOT NULL THEN
        RAISE EXCEPTION 'unknown device: app % has no token %', set_badge.app_id,
            quote_literal(left(set_badge.token, 12) || CASE WHEN length(set_badge.token) > 12 THEN '…' ELSE '' END)
            USING ERRCODE = 'no_data_found', COLUMN = 'token';
    END IF;
    RETURN changed;
END;
$$;

-- Records that a device opened a job's notification, named by job_id or by the apns_id of its delivery.
-- An open is kept once per (job, device): recording it again returns false and changes nothing. The job must
-- be the app's, and the device one the job was sent to or one the app has.
CREATE FUNCTION push.record_open(app_id text, token text, job_id bigint DEFAULT NULL, apns_id uuid DEFAULT NULL,
                                 opened_at timestamptz DEFAULT now())
    RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
#variable_conflict use_column
DECLARE
    normalized text;
    job        bigint := record_open.job_id;
    platform   text;
    added      boolean;
BEGIN
    PERFORM push.check_app_granted(record_open.app_id);
    IF record_open.token IS NULL THEN
        RAISE EXCEPTION 'token is required' USING ERRCODE = 'not_null_violation', COLUMN = 'token';
    END IF;
    IF (record_open.job_id IS NULL) = (record_open.apns_id IS NULL) THEN
        RAISE EXCEPTION 'give either job_id or apns_id' USING ERRCODE = 'check_violation',
            COLUMN = CASE WHEN record_open.job_id IS NULL THEN 'job_id' ELSE 'apns_id' END;
    END IF;
    IF record_open.opened_at IS NULL OR record_open.opened_at > now() + interval '1 hour' THEN
        RAISE EXCEPTION 'opened_at % is in the future', coalesce(record_open.opened_at::text, 'NULL')
            USING ERRCODE = 'check_violation', COLUMN = 'opened_at';
    END IF;
    normalized := CASE WHEN record_open.token ~ '^[0-9A-Fa-f]{64,200}$' THEN lower(record_open.token) ELSE record_open.token END;
    IF job IS NULL THEN
        SELECT d.job_id INTO job FROM push.deliveries d
         WHERE d.apns_id = record_open.apns_id AND d.app_id = record_open.app_id AND d.token = normalized
         LIMIT 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'unknown apns_id %: no delivery of app % to this token has it', record_open.apns_id, record_open.app_id
                USING ERRCODE = 'no_data_found', COLUMN = 'apns_id';
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM push.jobs j WHERE j.id = job AND j.app_id = record_open.app_id) THEN
        RAISE EXCEPTION 'unknown job_id %: app % has no such job', job, record_open.app_id
            USING ERRCODE = 'no_data_found', COLUMN = 'job_id';
    END IF;
    SELECT dv.platform INTO platform FROM push.devices dv WHERE dv.app_id = record_open.app_id AND dv.token = normalized;
    IF platform IS NULL THEN
        -- A device pruned or replaced since can still report an open of what it was sent.
        SELECT d.platform INTO platform
          FROM push.deliveries d WHERE d.job_id = job AND d.token = normalized LIMIT 1;
    END IF;
    IF platform IS NULL THEN
        RAISE EXCEPTION 'unknown device: app % has no token % and job % was not sent to it', record_open.app_id,
            quote_literal(left(record_open.token, 12) || CASE WHEN length(record_open.token) > 12 THEN '…' ELSE '' END), job
            USING ERRCODE = 'no_data_found', COLUMN = 'token';
    END IF;
    INSERT INTO push.opens AS o (job_id, app_id, token, platform, opened_at)
    VALUES (job, record_open.app_id, normalized, platform, record_open.opened_at)
    ON CONFLICT (job_id, token) DO NOTHING
    RETURNING true INTO added;
    RETURN coalesce(added, false);
END;
$$;

-- Per job and platform: how many were delivered, how many of those devices reported an open, and the rate
-- (opened / delivered, a fraction). A platform the job sent nothing to has no row.
CREATE VIEW push.job_engagement AS
 SELECT j.id AS job_id,
    j.app_id,
    p.platform,
    p.delivered,
    coalesce(o.opened, 0) AS opened,
    CASE WHEN p.delivered > 0 THEN round(coalesce(o.opened, 0)::numeric / p.delivered, 4) END AS open_rate,
    j.created_at,
    j.state
   FROM push.jobs j
   CROSS JOIN LATERAL (VALUES ('ios'::text, (j.delivered - j.android_delivered)::bigint),
                              ('android'::text, j.android_delivered::bigint)) AS p(platform, delivered)
   LEFT JOIN LATERAL (SELECT count(*) AS opened FROM push.opens op
                       WHERE op.job_id = j.id AND op.platform = p.platform) AS o ON true
  WHERE (p.delivered > 0 OR o.opened > 0)
    AND ((SELECT push.granted_apps()) IS NULL OR j.app_id = ANY ((SELECT push.granted_apps())::text[]));

-- The steps of ended jobs, and of jobs retention removed, are never read again.
CREATE FUNCTION push.remove_badge_steps(batch_size integer DEFAULT 5000) RETURNS integer
    LANGUAGE sql SET search_path = pg_catalog, push
AS $$
    WITH ended AS (
        SELECT s.job_id, s.token FROM push.badge_steps s
         WHERE NOT EXISTS (SELECT 1 FROM push.jobs j WHERE j.id = s.job_id AND j.state IN ('queued', 'running'))
         LIMIT batch_size
    ), removed AS (
        DELETE FROM push.badge_steps s USING ended e WHERE s.job_id = e.job_id AND s.token = e.token RETURNING 1
    )
    SELECT count(*)::int FROM removed
$$;

REVOKE ALL ON push.badge_steps, push.opens FROM PUBLIC;
REVOKE ALL ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz, text, text,
                                    integer, jsonb, text[], text, text, jsonb, text),
                       push.register_device(text, text, text, text[], text, text, text, text, text, text),
                       push.set_badge(text, text, text, integer), push.record_open(text, text, bigint, uuid, timestamptz),
                       push.validate_job_content(), push.remove_badge_steps(integer),
                       push.personal_bodies(jsonb, jsonb, jsonb, text, text, bigint), push.fcm_for_send(jsonb, bigint)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz, text, text,
                                       integer, jsonb, text[], text, text, jsonb, text),
                          push.register_device(text, text, text, text[], text, text, text, text, text, text),
                          push.set_badge(text, text, text, integer), push.record_open(text, text, bigint, uuid, timestamptz)
    TO pgpush_producer;
GRANT INSERT (localized, badge) ON push.jobs TO pgpush_producer;
-- Workers move the counters and record the steps, and read what they send through the claim.
GRANT UPDATE (badge) ON push.devices TO pgpush_worker;
GRANT SELECT, INSERT, DELETE ON push.badge_steps TO pgpush_worker;
GRANT EXECUTE ON FUNCTION push.personal_bodies(jsonb, jsonb, jsonb, text, text, bigint), push.fcm_for_send(jsonb, bigint),
                          push.remove_badge_steps(integer)
    TO pgpush_worker;
GRANT SELECT ON push.job_engagement TO pgpush_reader, pgpush_producer, pgpush_worker;
GRANT SELECT ON push.opens TO pgpush_dashboard;
