-- Least-privilege roles. They are NOLOGIN groups: operators create login users and grant them a role,
-- e.g. CREATE ROLE billing_service LOGIN PASSWORD '…' IN ROLE pgpush_producer.
-- Roles are cluster-wide, so creating them tolerates another database's migration having done it first.

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['pgpush_producer', 'pgpush_worker', 'pgpush_reader'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
END;
$$;

REVOKE ALL ON SCHEMA push FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA push FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA push FROM PUBLIC;

GRANT USAGE ON SCHEMA push TO pgpush_producer, pgpush_worker, pgpush_reader;

-- Reader: the views only.
GRANT SELECT ON push.job_progress, push.delivery_stats, push.queue_backlog, push.job_latency
   TO pgpush_reader;

-- Producer: enqueue (function or plain INSERT), register devices, cancel, read the views.
GRANT SELECT ON push.job_progress, push.delivery_stats, push.queue_backlog, push.job_latency
   TO pgpush_producer;
GRANT EXECUTE ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz,
                                        timestamptz, text, text, integer),
                         push.register_device(text, text, text, text[], text),
                         push.cancel(bigint)
   TO pgpush_producer;
GRANT INSERT (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at, expires_at,
              collapse_id, idempotency_key, priority) ON push.jobs TO pgpush_producer;
-- So that `INSERT … RETURNING id` works; nothing else of a job row is readable outside the views.
GRANT SELECT (id) ON push.jobs TO pgpush_producer;

-- Worker: everything the queue needs, nothing more. It cannot create apps or jobs, nor alter credentials.
GRANT SELECT ON push.apps TO pgpush_worker;
GRANT UPDATE (paused_reason, paused_at, updated_at) ON push.apps TO pgpush_worker;
GRANT SELECT, DELETE ON push.devices TO pgpush_worker;
GRANT SELECT, UPDATE ON push.jobs TO pgpush_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON push.chunks, push.prune_candidates, push.workers, push.provider_tokens
   TO pgpush_worker;
GRANT SELECT, INSERT ON push.deliveries, push.pruned_devices TO pgpush_worker;
GRANT SELECT ON push.job_progress, push.delivery_stats, push.queue_backlog, push.job_latency, push.app_status
   TO pgpush_worker;
GRANT EXECUTE ON FUNCTION push.ensure_delivery_partitions(integer), push.drop_delivery_partitions(interval),
                         push.cancel(bigint)
   TO pgpush_worker;
