-- Tenancy by app, and a worker that can write only what it owns.
--
-- An administrator grants a login (or a group role, for all its members) the apps it may use:
--   SELECT push.grant_app('billing_service', 'com.example.shop');
-- A login with at least one grant can enqueue, register devices, cancel jobs and read push.job_progress,
-- push.delivery_stats, push.job_latency and push.queue_backlog for its granted apps only; other apps' rows
-- are invisible to it. A login without any grant keeps the behaviour of its group role (pgpush_producer or
-- pgpush_reader) over every app, so nothing existing changes until the first grant. Superusers are never
-- restricted.
--
-- The caller is the role in effect for the session: the login, or the role it switched to with SET ROLE.
-- It is read from the session, not from current_user, which inside the API's SECURITY DEFINER functions
-- is their owner.

CREATE TABLE push.app_grants (
    role_name  name NOT NULL,
    app_id     text NOT NULL REFERENCES push.apps (id) ON DELETE CASCADE,
    granted_at timestamptz NOT NULL DEFAULT now(),
    granted_by text NOT NULL DEFAULT session_user,
    PRIMARY KEY (role_name, app_id)
);
REVOKE ALL ON push.app_grants FROM PUBLIC;

-- No SET clause, so it is inlined where it is used.
CREATE FUNCTION push.session_role() RETURNS name
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(pg_catalog.current_setting('role'), 'none'), session_user)::name
$$;

-- The apps the calling role may use, or NULL when it is not restricted (no grant applies to it, or it is a
-- superuser). A grant to a group role applies to its members. PL/pgSQL, so its plans are cached: it runs for
-- every enqueue, and a SQL function would be planned again on each call.
CREATE FUNCTION push.granted_apps() RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, push AS $$
DECLARE
    apps text[];
BEGIN
    -- Until the first grant nobody is restricted; this costs one probe of an empty table.
    IF NOT EXISTS (SELECT 1 FROM push.app_grants) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(DISTINCT g.app_id ORDER BY g.app_id) INTO apps
      FROM push.app_grants g
      JOIN pg_roles gr ON gr.rolname = g.role_name
      JOIN pg_roles c ON c.rolname = push.session_role()
     WHERE NOT c.rolsuper AND pg_has_role(c.oid, gr.oid, 'MEMBER');
    RETURN apps;
END;
$$;

-- Raises insufficient_privilege unless the calling role may use `app_id`. The message is the same whether
-- or not the app exists, so a restricted login cannot probe for other teams' apps.
CREATE FUNCTION push.check_app_granted(app_id text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, push AS $$
DECLARE
    allowed text[] := push.granted_apps();
BEGIN
    IF allowed IS NOT NULL AND (check_app_granted.app_id IS NULL OR NOT check_app_granted.app_id = ANY (allowed)) THEN
        RAISE EXCEPTION 'permission denied for app_id %: role % has no grant for it', check_app_granted.app_id, push.session_role()
            USING ERRCODE = 'insufficient_privilege', COLUMN = 'app_id',
                  HINT = 'an administrator grants apps with push.grant_app(role_name, app_id) or pgpush apps grant';
    END IF;
END;
$$;

CREATE FUNCTION push.grant_app(role_name text, app_id text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    added boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = grant_app.role_name) THEN
        RAISE EXCEPTION 'unknown role_name: %', grant_app.role_name USING ERRCODE = 'undefined_object', COLUMN = 'role_name';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = grant_app.app_id) THEN
        RAISE EXCEPTION 'unknown app_id: %', grant_app.app_id USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    INSERT INTO push.app_grants (role_name, app_id) VALUES (grant_app.role_name, grant_app.app_id)
    ON CONFLICT DO NOTHING
    RETURNING true INTO added;
    IF added THEN
        INSERT INTO push.operator_audit (action, app_id, detail) VALUES ('grant_app', grant_app.app_id, 'role ' || grant_app.role_name);
    END IF;
    RETURN coalesce(added, false);
END;
$$;

CREATE FUNCTION push.revoke_app(role_name text, app_id text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    removed boolean;
BEGIN
    DELETE FROM push.app_grants g WHERE g.role_name = revoke_app.role_name AND g.app_id = revoke_app.app_id
    RETURNING true INTO removed;
    IF removed THEN
        INSERT INTO push.operator_audit (action, app_id, detail) VALUES ('revoke_app', revoke_app.app_id, 'role ' || revoke_app.role_name);
    END IF;
    RETURN coalesce(removed, false);
END;
$$;

REVOKE ALL ON FUNCTION push.session_role(), push.granted_apps(), push.check_app_granted(text),
                       push.grant_app(text, text), push.revoke_app(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.session_role(), push.granted_apps(), push.check_app_granted(text)
   TO pgpush_producer, pgpush_reader, pgpush_worker;

-- Enqueue (push.enqueue and a plain INSERT alike): checked before anything else, the idempotency lookup
-- included, so a restricted login learns nothing of another app's jobs.
CREATE FUNCTION push.jobs_check_grant() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
BEGIN
    PERFORM push.check_app_granted(NEW.app_id);
    RETURN NEW;
END;
$$;
REVOKE ALL ON FUNCTION push.jobs_check_grant() FROM PUBLIC;
-- Named to sort before jobs_reset_failure and jobs_validate: row triggers fire in name order.
CREATE TRIGGER jobs_check_grant BEFORE INSERT ON push.jobs FOR EACH ROW EXECUTE FUNCTION push.jobs_check_grant();

CREATE OR REPLACE FUNCTION push.register_device(
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
    PERFORM push.check_app_granted(register_device.app_id);
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

-- A job of an app the caller may not use is as unknown to it as a job that does not exist.
CREATE OR REPLACE FUNCTION push.cancel(job_id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
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
    DELETE FROM push.chunks c WHERE c.job_id = cancel.job_id AND c.locked_by IS NULL;
    PERFORM pg_notify('pgpush_cancel', cancel.job_id::text);
    RETURN true;
END;
$$;

-- The producer and reader views, each filtered to the caller's apps. The filter's function is evaluated
-- once per query (an uncorrelated subquery), not once per row; security_barrier keeps a caller's own
-- functions in a WHERE clause from seeing the rows the filter removes.
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
  ) t
 WHERE (SELECT push.granted_apps()) IS NULL OR j.app_id = ANY ((SELECT push.granted_apps())::text[]);

CREATE OR REPLACE VIEW push.delivery_stats AS
SELECT (d.sent_at AT TIME ZONE 'UTC')::date AS day,
       d.app_id,
       d.status,
       d.reason,
       count(*) AS count
  FROM push.deliveries d
 WHERE (SELECT push.granted_apps()) IS NULL OR d.app_id = ANY ((SELECT push.granted_apps())::text[])
 GROUP BY 1, 2, 3, 4;

CREATE OR REPLACE VIEW push.job_latency AS
SELECT j.id AS job_id,
       j.app_id,
       j.created_at,
       j.send_at,
       j.first_sent_at,
       j.finished_at,
       j.first_sent_at - greatest(j.created_at, j.send_at) AS enqueue_to_first_send,
       j.finished_at - greatest(j.created_at, j.send_at) AS enqueue_to_finish
  FROM push.jobs j
 WHERE (SELECT push.granted_apps()) IS NULL OR j.app_id = ANY ((SELECT push.granted_apps())::text[]);

-- push.queue_backlog reads push.job_progress, so it is filtered through it.
ALTER VIEW push.job_progress SET (security_barrier = true);
ALTER VIEW push.delivery_stats SET (security_barrier = true);
ALTER VIEW push.job_latency SET (security_barrier = true);
ALTER VIEW push.queue_backlog SET (security_barrier = true);

-- The worker updates only the columns it owns: state, counters, timestamps and the failure reason. It
-- cannot rewrite a job's payload, audience, topic or timing. DELETE is retention's (finished jobs only).
REVOKE UPDATE ON push.jobs FROM pgpush_worker;
GRANT UPDATE (state, total, delivered, failed, expired, pruned, answered, bad_device_tokens,
              started_at, first_sent_at, finished_at, failure_reason) ON push.jobs TO pgpush_worker;
GRANT DELETE ON push.jobs TO pgpush_worker;

-- Retention removes old pruning audit rows as the worker (maintenance); without this grant every
-- maintenance pass of a least-privileged worker failed before it reached the pruner.
GRANT DELETE ON push.pruned_devices TO pgpush_worker;

-- push.enqueue as before, plus a range check of apns_priority: the column is a smallint, and a value outside
-- it failed in the assignment, before the validation trigger, with PostgreSQL's 'smallint out of range',
-- which names no field.
CREATE OR REPLACE FUNCTION push.enqueue(
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
    IF enqueue.apns_priority IS NOT NULL AND enqueue.apns_priority NOT IN (10, 5, 1) THEN
        RAISE EXCEPTION 'apns_priority % is not valid: APNs accepts 10, 5 or 1', enqueue.apns_priority
            USING ERRCODE = 'check_violation', COLUMN = 'apns_priority';
    END IF;
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

-- An idempotency key is indexed with its app; one longer than a B-tree entry may hold failed in the index with
-- "index row requires N bytes", naming no field. Keys are identifiers (a UUID, "order-123-shipped"): 255 bytes.
CREATE FUNCTION push.jobs_check_idempotency_key() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, push AS $$
BEGIN
    IF octet_length(NEW.idempotency_key) > 255 THEN
        RAISE EXCEPTION 'idempotency_key is % bytes, over the 255-byte limit', octet_length(NEW.idempotency_key)
            USING ERRCODE = 'check_violation', COLUMN = 'idempotency_key';
    END IF;
    RETURN NEW;
END;
$$;
REVOKE ALL ON FUNCTION push.jobs_check_idempotency_key() FROM PUBLIC;
CREATE TRIGGER jobs_check_idempotency_key BEFORE INSERT ON push.jobs
    FOR EACH ROW EXECUTE FUNCTION push.jobs_check_idempotency_key();
