-- Web Push (RFC 8030, 8291, 8292): browsers and Home Screen web apps as a third platform beside iOS and Android.
--
-- * push.apps gains vapid_private_key_path (a P-256 PEM key file on the workers, like the .p8), vapid_public_key
--   (base64url, uncompressed: the website's applicationServerKey) and vapid_subject (mailto: or https:, checked
--   against the rule Apple's push service enforces), all three or none, and web_push_paused_reason: set by a
--   worker when a push service refuses the app's VAPID key (401/403), which pauses the app's Web Push only.
-- * push.devices.platform 'web': the token is the subscription's endpoint, and web_p256dh and web_auth hold its
--   keys. push.register_device(..., subscription => <PushSubscription JSON>) registers one.
-- * push.enqueue(..., web => <plaintext JSON>, web_urgency => ...): a job reaches an app's web subscriptions
--   too. Without `web`, its message is derived from the APNs alert (push.web_from_apns).
-- * push.jobs and push.job_progress count web on its own (web_total, web_delivered, web_failed, and
--   web_pending in the view); chunks and deliveries carry platform 'web'.

-- ==== apps ========================================================================================

ALTER TABLE push.apps
    ADD COLUMN vapid_private_key_path text,
    ADD COLUMN vapid_public_key text,
    ADD COLUMN vapid_subject text,
    ADD COLUMN web_push_paused_reason text,
    ADD CONSTRAINT apps_vapid_complete CHECK (
        (vapid_private_key_path IS NULL) = (vapid_public_key IS NULL)
        AND (vapid_private_key_path IS NULL) = (vapid_subject IS NULL)),
    ADD CONSTRAINT apps_vapid_private_key_path_not_empty CHECK (vapid_private_key_path <> '');

-- An app reaches its devices through at least one provider: APNs (with its topic), FCM, or Web Push.
ALTER TABLE push.apps DROP CONSTRAINT apps_one_credential;
ALTER TABLE push.apps ADD CONSTRAINT apps_one_credential CHECK (
    (topic IS NOT NULL
     AND ((private_key_path IS NOT NULL AND team_id IS NOT NULL AND key_id IS NOT NULL AND certificate_path IS NULL)
          OR (certificate_path IS NOT NULL AND private_key_path IS NULL)))
    OR (topic IS NULL AND private_key_path IS NULL AND certificate_path IS NULL
        AND (fcm_project_id IS NOT NULL OR vapid_private_key_path IS NOT NULL)));

GRANT UPDATE (web_push_paused_reason) ON push.apps TO pgpush_worker, pgpush_dashboard_actions;

-- base64url (RFC 4648 §5) with or without padding, as browsers hand out subscription keys; NULL for anything
-- that is not.
CREATE FUNCTION push.base64url_decode(value text) RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog'
    AS $$
    SELECT CASE WHEN value ~ '^[A-Za-z0-9_-]*={0,2}$' AND length(rtrim(value, '=')) % 4 <> 1
                THEN decode(rpad(translate(rtrim(value, '='), '-_', '+/'),
                                 ((length(rtrim(value, '=')) + 3) / 4) * 4, '='), 'base64') END
$$;

CREATE FUNCTION push.base64url_encode(value bytea) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog'
    AS $$ SELECT rtrim(translate(replace(encode(value, 'base64'), E'\n', ''), '+/', '-_'), '=') $$;

-- Whether `point` is an uncompressed P-256 point (0x04, X, Y) on the curve y² = x³ − 3x + b over p: what
-- RFC 8291 takes as a subscription's p256dh and RFC 8292 as a VAPID public key. A point off the curve would be
-- refused by the encryption at send time, for every message; checked once here instead.
CREATE FUNCTION push.is_p256_point(point bytea) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog'
    AS $$
DECLARE
    -- 2^256 − 2^224 + 2^192 + 2^96 − 1 and the curve's b (SEC 2 §2.4.2).
    p numeric := 115792089210356248762697446949407573530086143415290314195533631308867097853951;
    b numeric := 41058363725152142129326129780047268409114441015993725554835256314039467401291;
    x numeric := 0;
    y numeric := 0;
BEGIN
    IF point IS NULL OR length(point) <> 65 OR get_byte(point, 0) <> 4 THEN
        RETURN false;
    END IF;
    FOR i IN 1..32 LOOP
        x := x * 256 + get_byte(point, i);
        y := y * 256 + get_byte(point, i + 32);
    END LOOP;
    IF x >= p OR y >= p THEN
        RETURN false;
    END IF;
    RETURN mod(y * y - (x * x * x - 3 * x + b), p) = 0;
END;
$$;

-- Why Apple's push service would refuse `subject` as a VAPID token's `sub` (it answers 403 BadJwtToken, which
-- looks like a key problem), or NULL when it is fine. The same rule as PGPushCore's VAPIDSubject: mailto: or
-- https:, no whitespace, no angle brackets, printable ASCII, and a real public domain (not localhost, not .local,
-- not an IP address, with a dot and a top-level domain of letters).
CREATE FUNCTION push.vapid_subject_problem(subject text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog'
    AS $$
DECLARE
    host   text;
    what   text;
    labels text[];
BEGIN
    IF subject IS NULL OR subject = '' THEN
        RETURN 'it is empty: use a mailto: address or an https: URL of whoever operates the sender';
    END IF;
    IF subject ~ '\s' THEN
        RETURN 'it has whitespace in it; write it as mailto:ops@example.com';
    END IF;
    IF subject ~ '[<>]' THEN
        RETURN 'it has angle brackets; write it as mailto:ops@example.com';
    END IF;
    IF subject !~ '^[!-~]+$' THEN
        RETURN 'it has control or non-ASCII characters; write an internationalised domain in its xn-- form';
    END IF;
    IF subject LIKE 'mailto:%' THEN
        IF array_length(string_to_array(substr(subject, 8), '@'), 1) <> 2 THEN
            RETURN 'its mailto: address does not have exactly one @';
        END IF;
        IF split_part(substr(subject, 8), '@', 1) = '' THEN
            RETURN 'its mailto: address has nothing before the @';
        END IF;
        host := lower(split_part(substr(subject, 8), '@', 2));
        what := 'mailto: address''s domain';
    ELSIF subject LIKE 'https:%' THEN
        host := lower(substring(subject FROM '^https://([^/?#]*)'));
        IF host IS NULL OR host = '' OR host LIKE '%@%' THEN
            RETURN 'it is not an https://host/… URL';
        END IF;
        IF host ~ '^\[' THEN
            RETURN 'it is on an IP address; use a domain name';
        END IF;
        host := regexp_replace(host, ':[0-9]*$', '');
        what := 'URL''s host';
    ELSE
        RETURN 'it does not start with mailto: or https:';
    END IF;
    IF host = '' THEN
        RETURN format('its %s is empty', what);
    END IF;
    IF host ~ '[:\[\]]' OR host ~ '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$' THEN
        RETURN 'it is on an IP address; use a domain name';
    END IF;
    IF host = 'localhost' OR host LIKE '%.localhost' THEN
        RETURN 'it is on localhost';
    END IF;
    IF host = 'local' OR host LIKE '%.local' THEN
        RETURN 'it is on a .local host';
    END IF;
    labels := string_to_array(host, '.');
    IF EXISTS (SELECT 1 FROM unnest(labels) l WHERE l !~ '^[a-z0-9-]{1,63}$') THEN
        RETURN format('its %s is not a host name (letters, digits, ''-'' and dots)', what);
    END IF;
    IF cardinality(labels) < 2 THEN
        RETURN format('its %s "%s" is not a real domain (it has no dot)', what, host);
    END IF;
    IF labels[cardinality(labels)] !~ '^[a-z]{2,}$' THEN
        RETURN format('its %s "%s" is not a real domain (its top-level domain is not letters)', what, host);
    END IF;
    RETURN NULL;
END;
$$;

-- An app's Web Push settings, checked when they are set: a subject Apple would refuse and a public key that is
-- not a P-256 point are refused here, with why, instead of failing every message later.
CREATE FUNCTION push.validate_app_web_push() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'push'
    AS $$
DECLARE
    problem text;
    key     bytea;
BEGIN
    IF NEW.vapid_subject IS NOT NULL THEN
        problem := push.vapid_subject_problem(NEW.vapid_subject);
        IF problem IS NOT NULL THEN
            RAISE EXCEPTION 'vapid_subject % is refused: Apple''s push service rejects such a subject with 403 BadJwtToken because %',
                quote_literal(left(NEW.vapid_subject, 80)), problem
                USING ERRCODE = 'check_violation', COLUMN = 'vapid_subject';
        END IF;
    END IF;
    IF NEW.vapid_public_key IS NOT NULL THEN
        key := push.base64url_decode(NEW.vapid_public_key);
        IF NOT coalesce(push.is_p256_point(key), false) THEN
            RAISE EXCEPTION 'vapid_public_key is not a base64url uncompressed P-256 public key (65 bytes starting 0x04, on the curve)'
                USING ERRCODE = 'check_violation', COLUMN = 'vapid_public_key';
        END IF;
        -- One spelling, the one browsers take as applicationServerKey.
        NEW.vapid_public_key := push.base64url_encode(key);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER apps_validate_web_push BEFORE INSERT OR UPDATE OF vapid_subject, vapid_public_key ON push.apps
    FOR EACH ROW EXECUTE FUNCTION push.validate_app_web_push();

-- A paused or resumed Web Push is an app event, as a paused or resumed app is.
CREATE FUNCTION push.app_web_push_pause_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $$
BEGIN
    INSERT INTO push.job_events_pending (app_id, event, body, flush)
    VALUES (NEW.id, CASE WHEN NEW.web_push_paused_reason IS NULL THEN 'app_resumed' ELSE 'app_paused' END,
            jsonb_build_object('reason', coalesce(NEW.web_push_paused_reason, OLD.web_push_paused_reason),
                               'provider', 'webpush'),
            push.job_events_first());
    RETURN NULL;
END;
$$;

CREATE TRIGGER apps_web_push_pause_events AFTER UPDATE OF web_push_paused_reason ON push.apps
    FOR EACH ROW WHEN (OLD.web_push_paused_reason IS DISTINCT FROM NEW.web_push_paused_reason)
    EXECUTE FUNCTION push.app_web_push_pause_events();

-- ==== devices, chunks =============================================================================

-- What pgpush takes as a Web Push endpoint, a Declarative Web Push navigate URL or an https subject: https, a
-- host without user info, and no whitespace. No search_path setting, so that it inlines into its callers.
CREATE FUNCTION push.is_https_url(url text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$ SELECT url OPERATOR(pg_catalog.~) '^https://[^/?#@[:space:]]+([/?#][^[:space:]]*)?$' $_$;

ALTER TABLE push.devices
    ADD COLUMN web_p256dh text,
    ADD COLUMN web_auth text;
ALTER TABLE push.devices DROP CONSTRAINT devices_platform_valid;
ALTER TABLE push.devices ADD CONSTRAINT devices_platform_valid CHECK (platform IN ('ios', 'android', 'web'));
ALTER TABLE push.devices DROP CONSTRAINT devices_token_format;
ALTER TABLE push.devices ADD CONSTRAINT devices_token_format CHECK (
    CASE platform
        WHEN 'ios' THEN length(token) BETWEEN 64 AND 200 AND token ~ '^[0-9a-f]+$'
        WHEN 'web' THEN length(token) <= 2048 AND push.is_https_url(token)
        ELSE length(token) BETWEEN 16 AND 1024 AND token ~ '^[A-Za-z0-9_:-]+$'
    END);
-- A web subscription cannot be sent to without its keys; no other device has any.
ALTER TABLE push.devices ADD CONSTRAINT devices_web_keys CHECK (
    (platform = 'web') = (web_p256dh IS NOT NULL AND web_auth IS NOT NULL)
    AND (platform = 'web') = (web_p256dh IS NOT NULL OR web_auth IS NOT NULL));

ALTER TABLE push.chunks DROP CONSTRAINT chunks_platform_valid;
ALTER TABLE push.chunks ADD CONSTRAINT chunks_platform_valid CHECK (platform IN ('ios', 'android', 'web'));

-- ==== jobs ========================================================================================

-- web_total starts at 0 like the other web counts: a job expanded before this migration had no web devices.
ALTER TABLE push.jobs
    ADD COLUMN web jsonb,
    ADD COLUMN web_urgency text,
    ADD COLUMN web_total bigint DEFAULT 0 NOT NULL,
    ADD COLUMN web_delivered bigint DEFAULT 0 NOT NULL,
    ADD COLUMN web_failed bigint DEFAULT 0 NOT NULL;
GRANT INSERT (web, web_urgency) ON push.jobs TO pgpush_producer;
GRANT UPDATE (web_total, web_delivered, web_failed) ON push.jobs TO pgpush_worker;

-- A device's provider by its token's shape, among the providers the app has: an APNs token is hex, an FCM
-- registration token base64url-like, a Web Push subscription its https endpoint.
CREATE FUNCTION push.token_platform(token text, has_apns boolean, has_fcm boolean, has_web boolean) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT CASE WHEN has_apns AND pg_catalog.length(token) OPERATOR(pg_catalog.>=) 64
                     AND pg_catalog.length(token) OPERATOR(pg_catalog.<=) 200
                     AND token OPERATOR(pg_catalog.~) '^[0-9A-Fa-f]+$' THEN 'ios'
                WHEN has_fcm AND pg_catalog.length(token) OPERATOR(pg_catalog.>=) 16
                     AND pg_catalog.length(token) OPERATOR(pg_catalog.<=) 1024
                     AND token OPERATOR(pg_catalog.~) '^[A-Za-z0-9_:-]+$' THEN 'android'
                WHEN has_web AND pg_catalog.length(token) OPERATOR(pg_catalog.<=) 2048
                     AND push.is_https_url(token) THEN 'web' END
$_$;
REVOKE ALL ON FUNCTION push.token_platform(text, boolean, boolean, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.token_platform(text, boolean, boolean, boolean) TO pgpush_worker;

-- The Web Push message a job sends when it gives none: its APNs alert's title and body, and the payload's other
-- keys as `data`, each left out when there is none: {"title": …, "body": …, "data": {…}}. A site's service
-- worker shows it with showNotification(title, {body, data}).
CREATE FUNCTION push.web_from_apns(payload jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog'
    AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
               'title', CASE WHEN jsonb_typeof(payload -> 'aps' -> 'alert' -> 'title') = 'string'
                             THEN payload -> 'aps' -> 'alert' -> 'title' END,
               'body', CASE WHEN jsonb_typeof(payload -> 'aps' -> 'alert') = 'string' THEN payload -> 'aps' -> 'alert'
                            WHEN jsonb_typeof(payload -> 'aps' -> 'alert' -> 'body') = 'string'
                            THEN payload -> 'aps' -> 'alert' -> 'body' END,
               'data', nullif(coalesce(payload, '{}') - 'aps', '{}')))
$$;

-- A job's Web Push message, checked: a JSON object whose text (the bytes encrypted and sent) fits one record of
-- RFC 8291 (4,096 − 86 − 16 − 1 = 3,993 bytes), and, for Declarative Web Push ("web_push": 8030, Safari 18.4+),
-- a notification with a title and an https navigate URL.
CREATE FUNCTION push.validate_web_message(message jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog'
    AS $$
DECLARE
    notification jsonb;
    bytes        integer;
BEGIN
    IF jsonb_typeof(message) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'web must be a JSON object: the message the site''s service worker receives'
            USING ERRCODE = 'check_violation', COLUMN = 'web';
    END IF;
    bytes := octet_length(message::text);
    IF bytes > 3993 THEN
        RAISE EXCEPTION 'web is % bytes, over Web Push''s 3993-byte limit for an encrypted message', bytes
            USING ERRCODE = 'check_violation', COLUMN = 'web';
    END IF;
    IF message ? 'web_push' THEN
        IF message -> 'web_push' IS DISTINCT FROM '8030'::jsonb THEN
            RAISE EXCEPTION 'web.web_push must be 8030 (Declarative Web Push)'
                USING ERRCODE = 'check_violation', COLUMN = 'web';
        END IF;
        notification := message -> 'notification';
        IF jsonb_typeof(notification) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'web.notification is required for Declarative Web Push ("web_push": 8030): an object with title and navigate'
                USING ERRCODE = 'check_violation', COLUMN = 'web';
        END IF;
        IF jsonb_typeof(notification -> 'title') IS DISTINCT FROM 'string' OR notification ->> 'title' = '' THEN
            RAISE EXCEPTION 'web.notification.title is required for Declarative Web Push: a non-empty string'
                USING ERRCODE = 'check_violation', COLUMN = 'web';
        END IF;
        IF jsonb_typeof(notification -> 'navigate') IS DISTINCT FROM 'string'
           OR NOT push.is_https_url(notification ->> 'navigate') THEN
            RAISE EXCEPTION 'web.notification.navigate is required for Declarative Web Push: an https URL the notification opens'
                USING ERRCODE = 'check_violation', COLUMN = 'web';
        END IF;
        IF notification ? 'body' AND jsonb_typeof(notification -> 'body') <> 'string' THEN
            RAISE EXCEPTION 'web.notification.body must be a string' USING ERRCODE = 'check_violation', COLUMN = 'web';
        END IF;
    END IF;
    RETURN message;
END;
$$;

-- ==== push.register_device: Web Push subscriptions =================================================

-- `token` may be left out for a web subscription (its endpoint is the token), so it takes a default, and the
-- signature changes: the old function goes.
DROP FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text, text);

CREATE FUNCTION push.register_device(app_id text, token text DEFAULT NULL::text, user_id text DEFAULT NULL::text, tags text[] DEFAULT '{}'::text[], replaces text DEFAULT NULL::text, platform text DEFAULT 'ios'::text, token_kind text DEFAULT 'device'::text, activity_id text DEFAULT NULL::text, activity_type text DEFAULT NULL::text, locale text DEFAULT NULL::text, subscription jsonb DEFAULT NULL::jsonb) RETURNS void
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
                                   locale, web_p256dh, web_auth)
    VALUES (register_device.app_id, normalized, register_device.user_id, register_device.tags, clock_timestamp(),
            register_device.platform, register_device.token_kind, register_device.activity_id, register_device.activity_type,
            -- A rotated activity token is the same activity: it keeps its locale unless one is given.
            coalesce(language, rotated_locale), push.base64url_encode(p256dh), push.base64url_encode(auth))
    ON CONFLICT ON CONSTRAINT devices_pkey DO UPDATE
       SET user_id = EXCLUDED.user_id, tags = EXCLUDED.tags, registered_at = EXCLUDED.registered_at,
           -- A registration without a locale keeps the one the device has; the badge counter is always kept.
           locale = coalesce(EXCLUDED.locale, d.locale),
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
$_$;
REVOKE ALL ON FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.register_device(text, text, text, text[], text, text, text, text, text, text, jsonb) TO pgpush_producer;

-- ==== push.enqueue: web and web_urgency =============================================================

DROP FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamp with time zone, timestamp with time zone, text, text, integer, jsonb, text[], text, text, jsonb, text, jsonb, text);

CREATE FUNCTION push.enqueue(app_id text, payload jsonb DEFAULT NULL::jsonb, push_type text DEFAULT NULL::text, apns_priority integer DEFAULT NULL::integer, tokens text[] DEFAULT NULL::text[], user_ids text[] DEFAULT NULL::text[], tags text[] DEFAULT NULL::text[], send_at timestamp with time zone DEFAULT now(), expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, collapse_id text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, priority integer DEFAULT 0, fcm jsonb DEFAULT NULL::jsonb, activity_ids text[] DEFAULT NULL::text[], activity_type text DEFAULT NULL::text, channel text DEFAULT NULL::text, localized jsonb DEFAULT NULL::jsonb, badge text DEFAULT NULL::text, labels jsonb DEFAULT NULL::jsonb, replace_key text DEFAULT NULL::text, web jsonb DEFAULT NULL::jsonb, web_urgency text DEFAULT NULL::text) RETURNS bigint
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
                                    channel, localized, badge, labels, replace_key, web, web_urgency)
        VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
                enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
                enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
                enqueue.channel, enqueue.localized, enqueue.badge, enqueue.labels, enqueue.replace_key, enqueue.web,
                enqueue.web_urgency)
        RETURNING j.id INTO job_id;
        RETURN job_id;
    END IF;

    -- An idempotent retry inserts nothing, so it replaces nothing (jobs_replace_pending fires on an insert).
    INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at,
                                expires_at, collapse_id, idempotency_key, priority, fcm, activity_ids, activity_type,
                                channel, localized, badge, labels, replace_key, web, web_urgency)
    VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
            enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
            enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
            enqueue.channel, enqueue.localized, enqueue.badge, enqueue.labels, enqueue.replace_key, enqueue.web,
                enqueue.web_urgency)
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
REVOKE ALL ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamp with time zone, timestamp with time zone, text, text, integer, jsonb, text[], text, text, jsonb, text, jsonb, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamp with time zone, timestamp with time zone, text, text, integer, jsonb, text[], text, text, jsonb, text, jsonb, text, jsonb, text) TO pgpush_producer;

-- ==== the job's counts, its events and its validation, with web ========================================

CREATE OR REPLACE FUNCTION push.cancel(job_id bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $$
#variable_conflict use_column
DECLARE
    updated bigint;
    allowed text[] := push.granted_apps();
BEGIN
    UPDATE push.jobs j SET state = 'cancelled', finished_at = now()
     WHERE j.id = cancel.job_id AND j.state IN ('queued', 'running')
       AND (allowed IS NULL OR j.app_id = ANY (allowed))
    RETURNING j.id INTO updated;
    IF updated IS NULL THEN
        IF NOT EXISTS (SELECT 1 FROM push.jobs j WHERE j.id = cancel.job_id AND (allowed IS NULL OR j.app_id = ANY (allowed))) THEN
            RAISE EXCEPTION 'unknown job_id: %', cancel.job_id USING ERRCODE = 'no_data_found', COLUMN = 'job_id';
        END IF;
        RETURN false;
    END IF;
    WITH dropped AS (
        DELETE FROM push.chunks c WHERE c.job_id = cancel.job_id AND c.locked_by IS NULL
        RETURNING c.estimated_tokens, c.platform
    ), counted AS (
        SELECT coalesce(sum(estimated_tokens), 0)::int8 AS tokens,
               coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'android'), 0)::int8 AS android,
               coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'web'), 0)::int8 AS web
          FROM dropped
    )
    UPDATE push.jobs j
       SET total = coalesce(j.total, 0) - counted.tokens,
           -- NULL stays NULL: a job expanded before 0011 has no per-platform figures.
           android_total = CASE WHEN j.total IS NULL THEN 0 ELSE j.android_total - counted.android END,
           web_total = CASE WHEN j.total IS NULL THEN 0 ELSE j.web_total - counted.web END,
           cancelled_tokens = j.cancelled_tokens + counted.tokens
      FROM counted
     WHERE j.id = cancel.job_id;
    PERFORM pg_notify('pgpush_cancel', cancel.job_id::text);
    RETURN true;
END;
$$;

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
                                   'web_delivered', j.web_delivered, 'web_failed', j.web_failed)
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

CREATE OR REPLACE FUNCTION push.validate_job() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $$
DECLARE
    app            push.apps%ROWTYPE;
    has_apns       boolean;
    has_fcm        boolean;
    has_web        boolean;
    web_bytes      integer;
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
    SELECT a.private_key_path IS NOT NULL OR a.certificate_path IS NOT NULL, a.fcm_project_id IS NOT NULL,
           a.vapid_private_key_path IS NOT NULL
      INTO has_apns, has_fcm, has_web
      FROM push.apps a
     WHERE a.id = NEW.app_id AND NOT EXISTS (SELECT 1 FROM push.app_grants);
    IF has_apns AND NOT has_fcm AND NOT has_web AND NEW.web IS NULL AND NEW.web_urgency IS NULL
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
                AND push.token_platform(NEW.tokens[array_lower(NEW.tokens, 1)], true, false, false) IS NOT NULL))
       AND (NEW.user_ids IS NULL OR (cardinality(NEW.user_ids) > 0 AND array_position(NEW.user_ids, NULL) IS NULL))
       AND (NEW.tags IS NULL OR (cardinality(NEW.tags) > 0 AND array_position(NEW.tags, NULL) IS NULL))
       AND NEW.priority IS NOT NULL
       AND NEW.state = 'queued' AND NEW.total IS NULL AND NEW.delivered = 0 AND NEW.failed = 0
       AND NEW.expired = 0 AND NEW.pruned = 0 AND NEW.answered = 0 AND NEW.bad_device_tokens = 0
       AND NEW.web_total = 0 AND NEW.web_delivered = 0 AND NEW.web_failed = 0
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
    has_web := app.vapid_private_key_path IS NOT NULL;

    IF NEW.payload IS NULL AND NOT has_apns THEN
        NEW.payload := '{}';
    END IF;
    IF NEW.payload IS NULL OR jsonb_typeof(NEW.payload) <> 'object' THEN
        -- A job with only a web (or Android) message, to an app whose iOS devices need an APNs payload.
        RAISE EXCEPTION 'payload must be a JSON object%', CASE WHEN NEW.payload IS NULL
            THEN format(': app %s has APNs credentials, so its iOS devices need a payload with an "aps" dictionary', NEW.app_id) ELSE '' END
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
        IF NEW.web IS NOT NULL OR NEW.web_urgency IS NOT NULL THEN
            RAISE EXCEPTION '% is given, but Live Activities are iOS only', CASE WHEN NEW.web IS NOT NULL THEN 'web' ELSE 'web_urgency' END
                USING ERRCODE = 'check_violation', COLUMN = CASE WHEN NEW.web IS NOT NULL THEN 'web' ELSE 'web_urgency' END;
        END IF;
        -- No Android or web message: only iOS devices have Live Activities.
        has_fcm := false;
        has_web := false;
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

    IF (NEW.web IS NOT NULL OR NEW.web_urgency IS NOT NULL) AND NOT has_web AND NOT live THEN
        RAISE EXCEPTION '% is given, but app % has no Web Push configured (vapid_private_key_path, vapid_public_key, vapid_subject)',
            CASE WHEN NEW.web IS NOT NULL THEN 'web' ELSE 'web_urgency' END, NEW.app_id
            USING ERRCODE = 'check_violation', COLUMN = CASE WHEN NEW.web IS NOT NULL THEN 'web' ELSE 'web_urgency' END;
    END IF;
    IF has_web THEN
        IF NEW.web_urgency IS NOT NULL AND NEW.web_urgency NOT IN ('very-low', 'low', 'normal', 'high') THEN
            RAISE EXCEPTION 'web_urgency % is not valid: Web Push takes ''very-low'', ''low'', ''normal'' or ''high''',
                quote_literal(NEW.web_urgency)
                USING ERRCODE = 'check_violation', COLUMN = 'web_urgency';
        END IF;
        -- What an alert is to APNs, a high urgency is to a push service: delivered now, even to a device saving
        -- its battery. Derived as FCM's priority is.
        NEW.web_urgency := coalesce(NEW.web_urgency, CASE WHEN NEW.apns_priority = 10 THEN 'high' ELSE 'normal' END);
        NEW.web := push.validate_web_message(coalesce(NEW.web, push.web_from_apns(NEW.payload)));
    ELSE
        NEW.web := NULL;
        NEW.web_urgency := NULL;
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
            one_platform := push.token_platform(one_token, has_apns, has_fcm, has_web);
            invalid := one_platform IS NULL;
            bad_token := one_token;
        ELSE
            SELECT t INTO bad_token FROM unnest(NEW.tokens) AS t WHERE push.token_platform(t, has_apns, has_fcm, has_web) IS NULL LIMIT 1;
            invalid := FOUND;
        END IF;
        IF invalid THEN
            RAISE EXCEPTION 'tokens contains an invalid device token %: %',
                coalesce(quote_literal(left(bad_token, 12) || CASE WHEN length(bad_token) > 12 THEN '…' ELSE '' END), 'NULL'),
                CASE WHEN NOT has_fcm AND NOT has_web THEN 'a token is 64 to 200 hex characters' ELSE concat_ws(', ',
                    CASE WHEN has_apns THEN 'an APNs token is 64 to 200 hex characters' END,
                    CASE WHEN has_fcm THEN 'an FCM registration token ' || CASE WHEN has_apns THEN '' ELSE 'is ' END
                                           || '16 to 1024 of A-Z, a-z, 0-9, ''_'', ''-'' and '':''' END,
                    CASE WHEN has_web THEN 'a Web Push subscription is its https endpoint URL' END) END
                USING ERRCODE = 'check_violation', COLUMN = 'tokens';
        END IF;
        -- Normalised once here so a chunk's index range means the same thing to every worker. FCM tokens are
        -- case-sensitive and kept as given.
        IF one_platform IS NOT NULL THEN
            NEW.tokens := ARRAY[CASE WHEN one_platform = 'ios' THEN lower(one_token) ELSE one_token END];
        ELSE
            NEW.tokens := ARRAY(SELECT DISTINCT CASE WHEN push.token_platform(t, has_apns, has_fcm, has_web) = 'ios' THEN lower(t) ELSE t END
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
    NEW.web_total := 0; NEW.web_delivered := 0; NEW.web_failed := 0;
    NEW.created_at := now();
    NEW.started_at := NULL; NEW.first_sent_at := NULL; NEW.finished_at := NULL;
    RETURN NEW;
END;
$$;
-- Every caller now names the web provider too.
DROP FUNCTION push.token_platform(text, boolean, boolean);

-- ==== views =========================================================================================

-- push.job_progress ends with the web columns; iOS is what is neither Android nor web. Every existing column
-- keeps its place and name.
CREATE OR REPLACE VIEW push.job_progress AS
 SELECT j.id AS job_id,
    j.app_id,
    j.state,
    t.total,
    j.delivered,
    (j.failed + j.expired) AS failed,
    j.pruned,
        CASE
            WHEN (j.state = ANY (ARRAY['queued'::text, 'running'::text])) THEN GREATEST((((t.total - j.delivered) - j.failed) - j.expired), (0)::bigint)
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
            WHEN (j.state = ANY (ARRAY['queued'::text, 'running'::text])) THEN GREATEST((((t.total - t.android_total - t.web_total) - (j.delivered - j.android_delivered - j.web_delivered)) - ((j.failed + j.expired) - j.android_failed - j.web_failed)), (0)::bigint)
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
        END + p.unknown) AS web_pending
   FROM (((push.jobs j
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
  WHERE ((( SELECT push.granted_apps() AS granted_apps) IS NULL) OR (j.app_id = ANY (( SELECT push.granted_apps() AS granted_apps)::text[])));


CREATE OR REPLACE VIEW push.job_engagement AS
 SELECT j.id AS job_id,
    j.app_id,
    p.platform,
    p.delivered,
    COALESCE(o.opened, (0)::bigint) AS opened,
        CASE
            WHEN (p.delivered > 0) THEN round(((COALESCE(o.opened, (0)::bigint))::numeric / (p.delivered)::numeric), 4)
            ELSE NULL::numeric
        END AS open_rate,
    j.created_at,
    j.state,
    j.labels
   FROM ((push.jobs j
     CROSS JOIN LATERAL ( VALUES ('ios'::text,((j.delivered - j.android_delivered) - j.web_delivered)), ('android'::text,j.android_delivered), ('web'::text,j.web_delivered)) p(platform, delivered))
     LEFT JOIN LATERAL ( SELECT count(*) AS opened
           FROM push.opens op
          WHERE ((op.job_id = j.id) AND (op.platform = p.platform))) o ON (true))
  WHERE (((p.delivered > 0) OR (o.opened > 0)) AND ((( SELECT push.granted_apps() AS granted_apps) IS NULL) OR (j.app_id = ANY (( SELECT push.granted_apps() AS granted_apps)::text[]))));

-- ==== push.resend_failed: a resend keeps the job's web message ======================================

CREATE OR REPLACE FUNCTION push.resend_failed(job_id bigint, reasons text[] DEFAULT NULL::text[]) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'push'
    AS $$
#variable_conflict use_column
DECLARE
    allowed  text[] := push.granted_apps();
    original push.jobs%ROWTYPE;
    targets  text[];
    resent   bigint;
    has_web  boolean;
BEGIN
    IF resend_failed.job_id IS NULL THEN
        RAISE EXCEPTION 'job_id is required' USING ERRCODE = 'not_null_violation', COLUMN = 'job_id';
    END IF;
    SELECT * INTO original FROM push.jobs j
     WHERE j.id = resend_failed.job_id AND (allowed IS NULL OR j.app_id = ANY (allowed));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown job_id: %', resend_failed.job_id USING ERRCODE = 'no_data_found', COLUMN = 'job_id';
    END IF;
    PERFORM push.check_app_granted(original.app_id);
    IF original.channel IS NOT NULL THEN
        RAISE EXCEPTION 'job % is a broadcast on channel %: it has no device tokens to resend; enqueue it again',
            original.id, quote_literal(original.channel)
            USING ERRCODE = 'check_violation', COLUMN = 'job_id';
    END IF;
    IF original.expires_at IS NOT NULL AND original.expires_at <= now() THEN
        RAISE EXCEPTION 'job % expired at %: its message is no longer to be sent; enqueue a new job instead',
            original.id, original.expires_at
            USING ERRCODE = 'check_violation', COLUMN = 'job_id';
    END IF;
    -- Two resends of one job at once would both find the same tokens.
    PERFORM pg_advisory_xact_lock(hashtextextended('pgpush-resend:' || original.id, 0));

    SELECT array_agg(o.token ORDER BY o.token) INTO targets
      FROM (SELECT d.token,
                   bool_or(d.status = 200) AS delivered,
                   bool_or(d.status >= 500 OR d.status = 429
                           OR (d.status = 0 AND coalesce(d.reason, '') NOT IN ('Expired', 'FrequencyCapped'))
                           OR d.reason = ANY (resend_failed.reasons)) AS retry
              FROM push.deliveries d
             WHERE d.job_id = original.id
             GROUP BY d.token) AS o
     WHERE o.retry AND NOT o.delivered
       AND EXISTS (SELECT 1 FROM push.devices v WHERE v.app_id = original.app_id AND v.token = o.token)
       AND NOT EXISTS (SELECT 1 FROM push.pruned_devices p
                        WHERE p.app_id = original.app_id AND p.pruned_at >= original.created_at
                          AND p.job_id = original.id AND p.token = o.token)
       AND NOT EXISTS (SELECT 1 FROM push.jobs r
                        WHERE r.resent_from = original.id AND r.state <> 'cancelled' AND o.token = ANY (r.tokens));
    IF targets IS NULL THEN
        RETURN NULL;
    END IF;

    -- The job's web message only while the app still has Web Push: the resend of its other devices must not be
    -- refused for it.
    has_web := EXISTS (SELECT 1 FROM push.apps a WHERE a.id = original.app_id AND a.vapid_private_key_path IS NOT NULL);
    -- Checked like any job (push.validate_job and the content and labels triggers), as the caller.
    INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, expires_at, collapse_id, priority,
                                fcm, activity_type, localized, badge, labels, resent_from, web, web_urgency)
    VALUES (original.app_id, original.payload, original.push_type, original.apns_priority, targets, original.expires_at,
            original.collapse_id, original.priority, original.fcm, original.activity_type, original.localized,
            original.badge, original.labels, original.id,
            CASE WHEN has_web THEN original.web END, CASE WHEN has_web THEN original.web_urgency END)
    RETURNING j.id INTO resent;
    RETURN resent;
END;
$$;
