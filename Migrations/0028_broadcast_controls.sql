-- 0028: broadcasts that respect people and backends.
--
-- * push.enqueue(..., max_rate => N) or (..., spread_over => interval): the job's own rate across the fleet,
--   to protect the producer's servers from a million apps waking at once. Its chunks are scheduled at
--   expansion (push.chunks.next_attempt_at), so any worker sends them as they come due and the app's other
--   jobs are not held back. push.jobs.throttle is the rate in effect (the lower of the job's and the app's).
-- * push.register_device(..., timezone => 'Europe/Paris') and push.apps.default_timezone; push.enqueue(...,
--   local_time => '09:00'): each device receives the job at the first 09:00 in its zone at or after send_at.
--   A zone's devices are key ranges of their own (push.chunks.zone), due at their moment: a whole-world job
--   costs per zone, not per device.
-- * push.apps.quiet_hours ('22:00-08:00', local time): a device inside the window waits until it ends.
--   push.enqueue(..., respect_quiet_hours => …) defaults to true below priority 10, false from 10 up.
-- * push.apps.frequency_caps ({"marketing": {"max": 3, "per": "24 hours"}}) and push.enqueue(...,
--   category => 'marketing'): a person (user_id, or the device alone) who already received `max` jobs of the
--   category in the window gets an outcome (status 0, FrequencyCapped) instead, counted in push.jobs.capped.
--   push.frequency_ledger holds, per person, the jobs of the window; its row lock makes the cap exact
--   across a fleet.

-- ==== time zones ==================================================================================

-- The zone names PostgreSQL knows, read once: pg_timezone_names reads every zone file (tens of milliseconds),
-- too slow for each registration. A name missing here is looked up there, so a zone added to the server's tz
-- database later is still taken.
CREATE TABLE push.time_zones (name text PRIMARY KEY);
INSERT INTO push.time_zones (name) SELECT DISTINCT name FROM pg_timezone_names ON CONFLICT DO NOTHING;

CREATE FUNCTION push.is_time_zone(name text) RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $$
BEGIN
    IF is_time_zone.name IS NULL OR length(is_time_zone.name) > 64 THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT 1 FROM push.time_zones z WHERE z.name = is_time_zone.name)
        OR EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = is_time_zone.name);
END;
$$;

-- Why a quiet-hours window is refused, or NULL when it is well formed: 'HH:MM-HH:MM', 24-hour local time,
-- a start and an end that differ. A window that ends before it starts runs over midnight.
CREATE FUNCTION push.quiet_hours_problem(quiet_hours text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN quiet_hours !~ '^([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9]$'
            THEN 'must be a daily window ''HH:MM-HH:MM'' in 24-hour local time, for example ''22:00-08:00'''
        WHEN split_part(quiet_hours, '-', 1) = split_part(quiet_hours, '-', 2)
            THEN 'starts and ends at the same minute'
    END
$$;

-- The moment a device in `zone` is to receive a job due at `due`: the first `local_time` there at or after
-- `due` (when given), then, when that falls inside the quiet-hours window, the window's end. Local times that a
-- daylight-saving change skips are taken as PostgreSQL reads them (the wall clock's next valid reading).
CREATE FUNCTION push.local_moment(due timestamptz, zone text, local_time time, quiet_hours text) RETURNS timestamptz
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'push'
    AS $$
DECLARE
    moment timestamptz := due;
    wall timestamp;
    quiet_start time;
    quiet_end time;
    inside boolean;
BEGIN
    IF local_time IS NOT NULL THEN
        wall := due AT TIME ZONE zone;
        IF wall::time <= local_time THEN
            moment := (wall::date + local_time) AT TIME ZONE zone;
        ELSE
            moment := ((wall::date + 1) + local_time) AT TIME ZONE zone;
        END IF;
        -- A wall-clock time repeated by a change back comes out once, the first time; a skipped one lands after it.
        IF moment < due THEN
            moment := (((due AT TIME ZONE zone)::date + 1) + local_time) AT TIME ZONE zone;
        END IF;
    END IF;
    IF quiet_hours IS NOT NULL THEN
        quiet_start := split_part(quiet_hours, '-', 1)::time;
        quiet_end := split_part(quiet_hours, '-', 2)::time;
        wall := moment AT TIME ZONE zone;
        IF quiet_start < quiet_end THEN
            inside := wall::time >= quiet_start AND wall::time < quiet_end;
        ELSE
            inside := wall::time >= quiet_start OR wall::time < quiet_end;
        END IF;
        IF inside THEN
            IF wall::time < quiet_end THEN
                moment := (wall::date + quiet_end) AT TIME ZONE zone;
            ELSE
                moment := ((wall::date + 1) + quiet_end) AT TIME ZONE zone;
            END IF;
        END IF;
    END IF;
    RETURN moment;
END;
$$;

-- ==== apps ========================================================================================

ALTER TABLE push.apps
    ADD COLUMN default_timezone text NOT NULL DEFAULT 'UTC',
    ADD COLUMN quiet_hours text,
    ADD COLUMN frequency_caps jsonb;

-- Why an app's frequency caps are refused, or NULL: an object of categories, each {"max": n, "per": interval}.
CREATE FUNCTION push.frequency_caps_problem(caps jsonb) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'push'
    AS $$
DECLARE
    category text;
    cap jsonb;
    per interval;
BEGIN
    IF jsonb_typeof(caps) <> 'object' THEN
        RETURN 'must be an object of categories, for example {"marketing": {"max": 3, "per": "24 hours"}}';
    END IF;
    FOR category, cap IN SELECT key, value FROM jsonb_each(caps) LOOP
        IF category !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$' THEN
            RETURN format('category %s must be 1 to 64 letters, digits, ''_'', ''.'', '':'' or ''-''', left(category, 70));
        END IF;
        IF jsonb_typeof(cap) <> 'object' OR NOT (cap ? 'max' AND cap ? 'per')
           OR (SELECT count(*) FROM jsonb_object_keys(cap)) <> 2 THEN
            RETURN format('%s must be {"max": <jobs>, "per": "<interval>"}', category);
        END IF;
        IF jsonb_typeof(cap -> 'max') <> 'number' OR (cap ->> 'max')::numeric <> trunc((cap ->> 'max')::numeric)
           OR (cap ->> 'max')::numeric < 1 OR (cap ->> 'max')::numeric > 10000 THEN
            RETURN format('%s.max must be a whole number of jobs from 1 to 10000', category);
        END IF;
        IF jsonb_typeof(cap -> 'per') <> 'string' THEN
            RETURN format('%s.per must be an interval such as "24 hours"', category);
        END IF;
        BEGIN
            per := (cap ->> 'per')::interval;
        EXCEPTION WHEN others THEN
            RETURN format('%s.per %s is not an interval: write it as "24 hours" or "7 days"', category, left(cap ->> 'per', 40));
        END;
        IF per <= interval '0' OR per > interval '366 days' THEN
            RETURN format('%s.per must be longer than zero and at most 366 days', category);
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE FUNCTION push.validate_app_broadcast_controls() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'push'
    AS $$
DECLARE
    problem text;
BEGIN
    IF NOT push.is_time_zone(NEW.default_timezone) THEN
        RAISE EXCEPTION 'default_timezone % is not a time zone PostgreSQL knows: give an IANA name such as ''Europe/Paris''',
            quote_literal(left(NEW.default_timezone, 64))
            USING ERRCODE = 'check_violation', COLUMN = 'default_timezone';
    END IF;
    problem := push.quiet_hours_problem(NEW.quiet_hours);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'quiet_hours % %', quote_literal(left(NEW.quiet_hours, 40)), problem
            USING ERRCODE = 'check_violation', COLUMN = 'quiet_hours';
    END IF;
    problem := push.frequency_caps_problem(NEW.frequency_caps);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'frequency_caps: %', problem USING ERRCODE = 'check_violation', COLUMN = 'frequency_caps';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER apps_validate_broadcast_controls BEFORE INSERT OR UPDATE OF default_timezone, quiet_hours, frequency_caps
    ON push.apps FOR EACH ROW EXECUTE FUNCTION push.validate_app_broadcast_controls();

-- ==== devices =====================================================================================

-- NULL: the app's default_timezone.
ALTER TABLE push.devices ADD COLUMN timezone text;

-- A zone's key range is read through this index: devices of one zone among forty interleave in key order, so
-- through the primary key a range of 1,000 of them read 41,000 rows (508 ms against 28 ms here, for 1,000,000
-- devices in 40 zones). NULL, the app's default zone, is kept in the index too: that arm is read the same way.
CREATE INDEX devices_by_zone ON push.devices USING btree (app_id, timezone, token);

-- ==== jobs ========================================================================================

ALTER TABLE push.jobs
    ADD COLUMN max_rate integer,
    ADD COLUMN spread_over interval,
    ADD COLUMN local_time time,
    ADD COLUMN respect_quiet_hours boolean,
    ADD COLUMN category text,
    -- Tokens not sent because their person reached the category's cap: outcomes of their own, not failures.
    ADD COLUMN capped bigint NOT NULL DEFAULT 0,
    -- The rate in effect, set at expansion: max_rate, or the audience over spread_over; the lower of that and
    -- the app's rate_limit.
    ADD COLUMN throttle double precision,
    -- Set at enqueue: the job's chunks are scheduled (a rate, a local time, or quiet hours that apply), so it is
    -- expanded by the path that schedules them, never as a small job.
    ADD COLUMN paced boolean NOT NULL DEFAULT false;

-- SECURITY DEFINER: a producer inserting a job has no right to read push.apps, whose quiet hours it asks for.
CREATE FUNCTION push.validate_job_controls() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $$
BEGIN
    IF NEW.max_rate IS NOT NULL AND NEW.spread_over IS NOT NULL THEN
        RAISE EXCEPTION 'give max_rate or spread_over, not both: spread_over sets the rate to the audience over the interval'
            USING ERRCODE = 'check_violation', COLUMN = 'spread_over';
    END IF;
    IF NEW.max_rate IS NOT NULL AND NEW.max_rate <= 0 THEN
        RAISE EXCEPTION 'max_rate % must be a positive number of notifications per second', NEW.max_rate
            USING ERRCODE = 'check_violation', COLUMN = 'max_rate';
    END IF;
    IF NEW.spread_over IS NOT NULL AND (NEW.spread_over <= interval '0' OR NEW.spread_over > interval '31 days') THEN
        RAISE EXCEPTION 'spread_over % must be longer than zero and at most 31 days', NEW.spread_over
            USING ERRCODE = 'check_violation', COLUMN = 'spread_over';
    END IF;
    IF NEW.category IS NOT NULL AND NEW.category !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$' THEN
        RAISE EXCEPTION 'category % must be 1 to 64 letters, digits, ''_'', ''.'', '':'' or ''-''', quote_literal(left(NEW.category, 70))
            USING ERRCODE = 'check_violation', COLUMN = 'category';
    END IF;
    IF NEW.channel_id IS NOT NULL AND (NEW.local_time IS NOT NULL OR NEW.category IS NOT NULL) THEN
        RAISE EXCEPTION 'a channel broadcast is one request to APNs, with no devices: local_time and category do not apply'
            USING ERRCODE = 'check_violation', COLUMN = CASE WHEN NEW.local_time IS NOT NULL THEN 'local_time' ELSE 'category' END;
    END IF;
    -- The urgent, transactional lane (priority 10 and up) goes through quiet hours unless told otherwise.
    NEW.respect_quiet_hours := coalesce(NEW.respect_quiet_hours, NEW.priority < 10);
    NEW.paced := NEW.max_rate IS NOT NULL OR NEW.spread_over IS NOT NULL OR NEW.local_time IS NOT NULL
        OR (NEW.respect_quiet_hours AND NEW.channel_id IS NULL
            AND EXISTS (SELECT 1 FROM push.apps a WHERE a.id = NEW.app_id AND a.quiet_hours IS NOT NULL));
    RETURN NEW;
END;
$$;

-- After jobs_validate, which resolves a channel's id.
CREATE TRIGGER jobs_validate_controls BEFORE INSERT ON push.jobs FOR EACH ROW EXECUTE FUNCTION push.validate_job_controls();

-- A paced job is looked up with the broadcasts, whatever its size.
DROP INDEX push.jobs_due_beyond_one;
CREATE INDEX jobs_due_beyond_one ON push.jobs USING btree (priority DESC, send_at, id)
    WHERE state = 'queued' AND channel_id IS NULL
      AND (paced OR NOT COALESCE(cardinality(tokens) = 1 OR cardinality(user_ids) = 1 OR cardinality(activity_ids) = 1, false));

-- The running paced jobs, whose chunks come due with no NOTIFY: each worker looks for the next ones every poll.
CREATE INDEX jobs_paced_running ON push.jobs USING btree (id) WHERE paced AND state = 'running';

-- ==== chunks ======================================================================================

-- A zone's part of a key range (local time, quiet hours): only devices of that zone are read from it.
ALTER TABLE push.chunks ADD COLUMN zone text;

-- ==== frequency caps ==============================================================================

-- Per app, category and person, the jobs that reached the person within the longest window still kept, with
-- when. A row is locked while a chunk's worker counts it, so two workers cannot both take the last slot.
CREATE TABLE push.frequency_ledger (
    app_id text NOT NULL REFERENCES push.apps (id) ON DELETE CASCADE,
    category text NOT NULL,
    person text NOT NULL,
    job_ids bigint[] NOT NULL,
    sent_at timestamptz[] NOT NULL,
    PRIMARY KEY (app_id, category, person)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02);


-- ==== producer API ================================================================================

DROP FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamp with time zone, timestamp with time zone, text, text, integer, jsonb, text[], text, text, jsonb, text, jsonb, text, jsonb, text);

CREATE FUNCTION push.enqueue(app_id text, payload jsonb DEFAULT NULL::jsonb, push_type text DEFAULT NULL::text, apns_priority integer DEFAULT NULL::integer, tokens text[] DEFAULT NULL::text[], user_ids text[] DEFAULT NULL::text[], tags text[] DEFAULT NULL::text[], send_at timestamp with time zone DEFAULT now(), expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, collapse_id text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, priority integer DEFAULT 0, fcm jsonb DEFAULT NULL::jsonb, activity_ids text[] DEFAULT NULL::text[], activity_type text DEFAULT NULL::text, channel text DEFAULT NULL::text, localized jsonb DEFAULT NULL::jsonb, badge text DEFAULT NULL::text, labels jsonb DEFAULT NULL::jsonb, replace_key text DEFAULT NULL::text, web jsonb DEFAULT NULL::jsonb, web_urgency text DEFAULT NULL::text, max_rate integer DEFAULT NULL::integer, spread_over interval DEFAULT NULL::interval, local_time time without time zone DEFAULT NULL::time without time zone, respect_quiet_hours boolean DEFAULT NULL::boolean, category text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $$
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
                                    channel, localized, badge, labels, replace_key, web, web_urgency, max_rate,
                                    spread_over, local_time, respect_quiet_hours, category)
        VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
                enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
                enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
                enqueue.channel, enqueue.localized, enqueue.badge, enqueue.labels, enqueue.replace_key, enqueue.web,
                enqueue.web_urgency, enqueue.max_rate, enqueue.spread_over, enqueue.local_time,
                enqueue.respect_quiet_hours, enqueue.category)
        RETURNING j.id INTO job_id;
        RETURN job_id;
    END IF;

    -- An idempotent retry inserts nothing, so it replaces nothing (jobs_replace_pending fires on an insert).
    INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at,
                                expires_at, collapse_id, idempotency_key, priority, fcm, activity_ids, activity_type,
                                channel, localized, badge, labels, replace_key, web, web_urgency, max_rate,
                                    spread_over, local_time, respect_quiet_hours, category)
    VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
            enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
            enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
            enqueue.channel, enqueue.localized, enqueue.badge, enqueue.labels, enqueue.replace_key, enqueue.web,
                enqueue.web_urgency, enqueue.max_rate, enqueue.spread_over, enqueue.local_time,
            enqueue.respect_quiet_hours, enqueue.category)
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

REVOKE ALL ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamp with time zone, timestamp with time zone, text, text, integer, jsonb, text[], text, text, jsonb, text, jsonb, text, jsonb, text, integer, interval, time, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamp with time zone, timestamp with time zone, text, text, integer, jsonb, text[], text, text, jsonb, text, jsonb, text, jsonb, text, integer, interval, time, boolean, text) TO pgpush_producer;

DROP FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text, text, jsonb);

CREATE FUNCTION push.register_device(app_id text, token text DEFAULT NULL::text, user_id text DEFAULT NULL::text, tags text[] DEFAULT '{}'::text[], replaces text DEFAULT NULL::text, platform text DEFAULT 'ios'::text, token_kind text DEFAULT 'device'::text, activity_id text DEFAULT NULL::text, activity_type text DEFAULT NULL::text, locale text DEFAULT NULL::text, subscription jsonb DEFAULT NULL::jsonb, timezone text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $_$
#variable_conflict use_column
DECLARE
    normalized  text;
    rule        text;
    rotated_at  timestamptz;
    rotated_locale text;
    language    text;
    endpoint    text;
    p256dh      bytea;
    auth        bytea;
BEGIN
    PERFORM push.check_app_granted(register_device.app_id);
    IF NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = register_device.app_id) THEN
        RAISE EXCEPTION 'unknown app_id: %', register_device.app_id
            USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    IF register_device.platform IS NULL OR register_device.platform NOT IN ('ios', 'android', 'web') THEN
        RAISE EXCEPTION 'platform must be ''ios'', ''android'' or ''web'''
            USING ERRCODE = 'check_violation', COLUMN = 'platform';
    END IF;
    IF register_device.subscription IS NOT NULL AND register_device.platform <> 'web' THEN
        RAISE EXCEPTION 'subscription is a Web Push subscription: platform must be ''web'''
            USING ERRCODE = 'check_violation', COLUMN = 'subscription';
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
    ELSIF register_device.platform = 'web' THEN
        -- The object a browser's PushSubscription.toJSON() returns, as is: {"endpoint", "expirationTime", "keys":
        -- {"p256dh", "auth"}}. The endpoint is the device's token.
        IF NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = register_device.app_id AND a.vapid_public_key IS NOT NULL) THEN
            RAISE EXCEPTION 'app % has no Web Push configured: set its vapid_private_key_path, vapid_public_key and vapid_subject first',
                register_device.app_id
                USING ERRCODE = 'check_violation', COLUMN = 'app_id';
        END IF;
        IF register_device.subscription IS NULL THEN
            RAISE EXCEPTION 'subscription is required for platform ''web'': the JSON of the browser''s PushSubscription (subscription.toJSON())'
                USING ERRCODE = 'not_null_violation', COLUMN = 'subscription';
        END IF;
        IF jsonb_typeof(register_device.subscription) <> 'object' THEN
            RAISE EXCEPTION 'subscription must be a JSON object: the browser''s subscription.toJSON()'
                USING ERRCODE = 'check_violation', COLUMN = 'subscription';
        END IF;
        endpoint := CASE WHEN jsonb_typeof(register_device.subscription -> 'endpoint') = 'string'
                         THEN register_device.subscription ->> 'endpoint' END;
        IF endpoint IS NULL THEN
            RAISE EXCEPTION 'subscription.endpoint is required: the push service URL of the subscription'
                USING ERRCODE = 'check_violation', COLUMN = 'subscription';
        END IF;
        IF length(endpoint) > 2048 THEN
            RAISE EXCEPTION 'subscription.endpoint is % characters long: an endpoint is at most 2048', length(endpoint)
                USING ERRCODE = 'check_violation', COLUMN = 'subscription';
        END IF;
        IF substring(endpoint FROM '^https://([^/?#]*)') LIKE '%@%' THEN
            RAISE EXCEPTION 'subscription.endpoint has user info (user@host): a push service URL has none'
                USING ERRCODE = 'check_violation', COLUMN = 'subscription';
        END IF;
        IF NOT push.is_https_url(endpoint) THEN
            RAISE EXCEPTION 'subscription.endpoint is not an https URL'
                USING ERRCODE = 'check_violation', COLUMN = 'subscription';
        END IF;
        IF jsonb_typeof(register_device.subscription -> 'keys') IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'subscription.keys is required: an object with p256dh and auth'
                USING ERRCODE = 'check_violation', COLUMN = 'subscription';
        END IF;
        p256dh := CASE WHEN jsonb_typeof(register_device.subscription -> 'keys' -> 'p256dh') = 'string'
                       THEN push.base64url_decode(register_device.subscription -> 'keys' ->> 'p256dh') END;
        IF NOT coalesce(push.is_p256_point(p256dh), false) THEN
            RAISE EXCEPTION 'subscription.keys.p256dh is not a base64url uncompressed P-256 public key (65 bytes starting 0x04, on the curve)'
                USING ERRCODE = 'check_violation', COLUMN = 'subscription';
        END IF;
        auth := CASE WHEN jsonb_typeof(register_device.subscription -> 'keys' -> 'auth') = 'string'
                     THEN push.base64url_decode(register_device.subscription -> 'keys' ->> 'auth') END;
        IF auth IS NULL OR length(auth) <> 16 THEN
            RAISE EXCEPTION 'subscription.keys.auth is not 16 bytes of base64url: the subscription''s authentication secret'
                USING ERRCODE = 'check_violation', COLUMN = 'subscription';
        END IF;
        IF register_device.token IS NOT NULL AND register_device.token <> endpoint THEN
            RAISE EXCEPTION 'token must equal subscription.endpoint for platform ''web'' (or be left out)'
                USING ERRCODE = 'check_violation', COLUMN = 'token';
        END IF;
        IF register_device.replaces IS NOT NULL
           AND NOT (length(register_device.replaces) <= 2048 AND push.is_https_url(register_device.replaces)) THEN
            RAISE EXCEPTION 'replaces is not a Web Push endpoint: give the old subscription''s https endpoint URL'
                USING ERRCODE = 'check_violation', COLUMN = 'replaces';
        END IF;
        normalized := endpoint;
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

    IF register_device.timezone IS NOT NULL AND NOT push.is_time_zone(register_device.timezone) THEN
        RAISE EXCEPTION 'timezone % is not a time zone PostgreSQL knows: give an IANA name such as ''Europe/Paris''',
            quote_literal(left(register_device.timezone, 64))
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'timezone';
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
                                   locale, web_p256dh, web_auth, timezone)
    VALUES (register_device.app_id, normalized, register_device.user_id, register_device.tags, clock_timestamp(),
            register_device.platform, register_device.token_kind, register_device.activity_id, register_device.activity_type,
            -- A rotated activity token is the same activity: it keeps its locale unless one is given.
            coalesce(language, rotated_locale), push.base64url_encode(p256dh), push.base64url_encode(auth),
            register_device.timezone)
    ON CONFLICT ON CONSTRAINT devices_pkey DO UPDATE
       SET user_id = EXCLUDED.user_id, tags = EXCLUDED.tags, registered_at = EXCLUDED.registered_at,
           -- A registration without a locale keeps the one the device has; the badge counter is always kept.
           locale = coalesce(EXCLUDED.locale, d.locale),
           -- Likewise its time zone: an app that registers on every launch need not send it each time.
           timezone = coalesce(EXCLUDED.timezone, d.timezone),
           platform = EXCLUDED.platform, token_kind = EXCLUDED.token_kind, activity_id = EXCLUDED.activity_id,
           activity_type = EXCLUDED.activity_type, web_p256dh = EXCLUDED.web_p256dh, web_auth = EXCLUDED.web_auth,
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
            RETURNING d.created_at, d.platform, d.badge, d.locale, d.timezone
        )
        UPDATE push.devices n
           SET created_at = CASE WHEN n.created_at IS NOT NULL
                                      AND (replaced.created_at IS NULL OR replaced.created_at < n.created_at)
                                 THEN replaced.created_at ELSE n.created_at END,
               -- The same device under a new name keeps its badge counter, and its locale unless one was given.
               badge = greatest(n.badge, replaced.badge),
               locale = coalesce(n.locale, replaced.locale),
               timezone = coalesce(n.timezone, replaced.timezone)
          FROM replaced
         WHERE n.app_id = register_device.app_id AND n.token = normalized AND n.platform = replaced.platform;
    END IF;
END;
$_$;

REVOKE ALL ON FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text, text, jsonb, text) TO pgpush_producer;

REVOKE ALL ON FUNCTION push.is_time_zone(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.is_time_zone(text) TO pgpush_producer, pgpush_worker;
GRANT SELECT ON push.time_zones TO pgpush_reader, pgpush_producer, pgpush_worker;

-- A producer inserting jobs directly names the new columns as it does the others.
GRANT INSERT (max_rate, spread_over, local_time, respect_quiet_hours, category) ON push.jobs TO pgpush_producer;
GRANT UPDATE (capped, throttle) ON push.jobs TO pgpush_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON push.frequency_ledger TO pgpush_worker;
GRANT SELECT ON push.frequency_ledger TO pgpush_reader;

-- ==== job events ==================================================================================

-- A job's events count its capped tokens too: total = delivered + failed + expired + capped.
CREATE OR REPLACE FUNCTION push.flush_job_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $$
DECLARE
    me     xid8 := pg_current_xact_id();
    apps   text[];
    jobs   bigint[];
    events text[];
    bodies jsonb[];
    stamp  timestamptz;
    newest bigint;
BEGIN
    PERFORM set_config('pgpush.job_events_flush', '', true);
    WITH moved AS (
        DELETE FROM push.job_events_pending p WHERE p.xid = me
        RETURNING p.seq, p.app_id, p.job_id, p.event, p.body
    )
    SELECT array_agg(m.app_id ORDER BY m.seq), array_agg(m.job_id ORDER BY m.seq),
           array_agg(CASE WHEN m.event = 'job_cancelled' AND j.replaced_by IS NOT NULL THEN 'job_replaced' ELSE m.event END
                     ORDER BY m.seq),
           array_agg(CASE WHEN m.body IS NOT NULL THEN m.body
                          WHEN j.id IS NULL THEN '{}'::jsonb
                          ELSE jsonb_build_object(
                                   'state', j.state, 'total', j.total, 'delivered', j.delivered, 'failed', j.failed,
                                   'expired', j.expired, 'pruned', j.pruned, 'cancelled_tokens', j.cancelled_tokens,
                                   'removed_before_send', j.removed_before_send, 'added_before_send', j.added_before_send,
                                   'answered', j.answered, 'bad_device_tokens', j.bad_device_tokens,
                                   'android_total', j.android_total, 'android_delivered', j.android_delivered,
                                   'android_failed', j.android_failed, 'web_total', j.web_total,
                                   'web_delivered', j.web_delivered, 'web_failed', j.web_failed, 'capped', j.capped)
                               || CASE WHEN j.failure_reason IS NOT NULL
                                       THEN jsonb_build_object('failure_reason', j.failure_reason) ELSE '{}' END
                               || CASE WHEN m.event = 'job_cancelled' AND j.replaced_by IS NOT NULL
                                       THEN jsonb_build_object('replaced_by', j.replaced_by) ELSE '{}' END
                               || CASE WHEN j.idempotency_key IS NOT NULL
                                       THEN jsonb_build_object('idempotency_key', j.idempotency_key) ELSE '{}' END
                     END ORDER BY m.seq)
      INTO apps, jobs, events, bodies
      FROM moved m
      LEFT JOIN push.jobs j ON j.id = m.job_id;
    IF apps IS NULL THEN
        RETURN NULL;
    END IF;
    -- The lock first, then the time and the ids: the next writer takes both after this commit is visible.
    PERFORM pg_advisory_xact_lock(push.job_events_lock_key());
    stamp := clock_timestamp();
    WITH written AS (
        INSERT INTO push.job_events (app_id, job_id, at, event, body)
        SELECT e.app_id, e.job_id, stamp, e.event, e.body
          FROM unnest(apps, jobs, events, bodies) WITH ORDINALITY AS e(app_id, job_id, event, body, n)
         ORDER BY e.n
        RETURNING id
    )
    SELECT max(id) INTO newest FROM written;
    PERFORM pg_notify('pgpush_job_events', newest::text);
    RETURN NULL;
END;
$$;

-- ==== views =======================================================================================

CREATE OR REPLACE VIEW push.delivery_stats WITH (security_barrier='true') AS
 SELECT ((d.sent_at AT TIME ZONE 'UTC'::text))::date AS day,
    d.app_id,
    d.status,
    d.reason,
    count(*) AS count,
    d.platform,
    count(*) FILTER (WHERE ((d.status = 0) AND (d.reason = 'FrequencyCapped'::text))) AS capped
   FROM push.deliveries d
  WHERE ((( SELECT push.granted_apps() AS granted_apps) IS NULL) OR (d.app_id = ANY (( SELECT push.granted_apps() AS granted_apps)::text[])))
  GROUP BY (((d.sent_at AT TIME ZONE 'UTC'::text))::date), d.app_id, d.status, d.reason, d.platform;

CREATE OR REPLACE VIEW push.job_progress AS
 SELECT j.id AS job_id,
    j.app_id,
    j.state,
    t.total,
    j.delivered,
    (j.failed + j.expired) AS failed,
    j.pruned,
        CASE
            WHEN (j.state = ANY (ARRAY['queued'::text, 'running'::text])) THEN GREATEST(((((t.total - j.delivered) - j.failed) - j.expired) - j.capped), (0)::bigint)
            ELSE (0)::bigint
        END AS pending,
    j.created_at,
    j.started_at,
    j.finished_at,
    j.expired,
    j.priority,
    j.send_at,
    j.first_sent_at,
    j.failure_reason,
    ((t.total - t.android_total) - t.web_total) AS ios_total,
    (((j.delivered - j.android_delivered) - j.web_delivered) + p.unknown) AS ios_delivered,
    ((((j.failed + j.expired) - j.android_failed) - j.web_failed) + p.unknown) AS ios_failed,
    (
        CASE
            WHEN (j.state = ANY (ARRAY['queued'::text, 'running'::text])) THEN GREATEST(((((t.total - t.android_total) - t.web_total) - ((j.delivered - j.android_delivered) - j.web_delivered)) - (((j.failed + j.expired) - j.android_failed) - j.web_failed)), (0)::bigint)
            ELSE (0)::bigint
        END + p.unknown) AS ios_pending,
    t.android_total,
    (j.android_delivered + p.unknown) AS android_delivered,
    (j.android_failed + p.unknown) AS android_failed,
    (
        CASE
            WHEN (j.state = ANY (ARRAY['queued'::text, 'running'::text])) THEN GREATEST(((t.android_total - j.android_delivered) - j.android_failed), (0)::bigint)
            ELSE (0)::bigint
        END + p.unknown) AS android_pending,
    j.audience_at,
    j.removed_before_send,
    j.added_before_send,
    j.cancelled_tokens,
    j.channel,
    j.labels,
    j.replace_key,
    j.replaced_by,
    j.resent_from,
    t.web_total,
    (j.web_delivered + p.unknown) AS web_delivered,
    (j.web_failed + p.unknown) AS web_failed,
    (
        CASE
            WHEN (j.state = ANY (ARRAY['queued'::text, 'running'::text])) THEN GREATEST(((t.web_total - j.web_delivered) - j.web_failed), (0)::bigint)
            ELSE (0)::bigint
        END + p.unknown) AS web_pending,
    j.capped,
    j.throttle,
        CASE
            WHEN (j.paced AND (w.last_due IS NOT NULL) AND (j.state = ANY (ARRAY['queued'::text, 'running'::text]))) THEN GREATEST(w.last_due, now())
            ELSE NULL::timestamp with time zone
        END AS estimated_finish_at,
    COALESCE(w.waiting, (0)::bigint) AS waiting_tokens,
    z.zones AS waiting_zones,
    z.moments AS waiting_moments
   FROM (((((push.jobs j
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN (j.total IS NOT NULL) THEN NULL::bigint[]
                    WHEN (j.channel IS NOT NULL) THEN ARRAY[(1)::bigint, (0)::bigint, (0)::bigint]
                    WHEN (j.activity_ids IS NOT NULL) THEN ( SELECT ARRAY[count(*), (0)::bigint, (0)::bigint] AS "array"
                       FROM push.devices d
                      WHERE ((d.app_id = j.app_id) AND (d.token_kind = 'activity'::text) AND (d.activity_id = ANY (j.activity_ids))))
                    WHEN (j.tokens IS NOT NULL) THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE ((a.fcm_project_id IS NOT NULL) AND (x.x !~ '^https://'::text) AND (NOT ((x.x ~ '^[0-9A-Fa-f]{64,200}$'::text) AND ((a.private_key_path IS NOT NULL) OR (a.certificate_path IS NOT NULL)))))), count(*) FILTER (WHERE ((a.vapid_private_key_path IS NOT NULL) AND (x.x ~ '^https://'::text)))] AS "array"
                       FROM unnest(j.tokens) x(x),
                        push.apps a
                      WHERE (a.id = j.app_id))
                    WHEN (j.user_ids IS NOT NULL) THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE (d.platform = 'android'::text)), count(*) FILTER (WHERE (d.platform = 'web'::text))] AS "array"
                       FROM push.devices d
                      WHERE ((d.app_id = j.app_id) AND (d.user_id = ANY (j.user_ids)) AND (d.token_kind = j.audience_kind) AND ((j.activity_type IS NULL) OR (d.activity_type = j.activity_type))))
                    WHEN (j.tags IS NOT NULL) THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE (d.platform = 'android'::text)), count(*) FILTER (WHERE (d.platform = 'web'::text))] AS "array"
                       FROM push.devices d
                      WHERE ((d.app_id = j.app_id) AND (d.tags && j.tags) AND (d.token_kind = j.audience_kind) AND ((j.activity_type IS NULL) OR (d.activity_type = j.activity_type))))
                    ELSE ( SELECT ARRAY[count(*), count(*) FILTER (WHERE (d.platform = 'android'::text)), count(*) FILTER (WHERE (d.platform = 'web'::text))] AS "array"
                       FROM push.devices d
                      WHERE ((d.app_id = j.app_id) AND (d.token_kind = j.audience_kind) AND ((j.activity_type IS NULL) OR (d.activity_type = j.activity_type))))
                END AS audience) c)
     CROSS JOIN LATERAL ( SELECT COALESCE(j.total, c.audience[1]) AS total,
                CASE
                    WHEN (j.total IS NULL) THEN c.audience[2]
                    ELSE j.android_total
                END AS android_total,
                CASE
                    WHEN (j.total IS NULL) THEN c.audience[3]
                    ELSE j.web_total
                END AS web_total) t)
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN (t.android_total IS NULL) THEN NULL::bigint
                    ELSE (0)::bigint
                END AS unknown) p)
     LEFT JOIN LATERAL ( SELECT (sum(c.estimated_tokens) FILTER (WHERE ((c.zone IS NOT NULL) AND (c.next_attempt_at > now()))))::bigint AS waiting,
            max(c.next_attempt_at) AS last_due
           FROM push.chunks c
          WHERE ((c.job_id = j.id) AND j.paced AND (j.state = ANY (ARRAY['queued'::text, 'running'::text])))) w ON (true))
     LEFT JOIN LATERAL ( SELECT array_agg(m.zone ORDER BY m.moment, m.zone) AS zones,
            array_agg(m.moment ORDER BY m.moment, m.zone) AS moments
           FROM ( SELECT c.zone,
                    min(c.next_attempt_at) AS moment
                   FROM push.chunks c
                  WHERE ((c.job_id = j.id) AND j.paced AND (j.state = ANY (ARRAY['queued'::text, 'running'::text])) AND (c.zone IS NOT NULL) AND (c.next_attempt_at > now()))
                  GROUP BY c.zone) m) z ON (true))
  WHERE ((( SELECT push.granted_apps() AS granted_apps) IS NULL) OR (j.app_id = ANY (( SELECT push.granted_apps() AS granted_apps)::text[])));

