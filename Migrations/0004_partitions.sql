-- Daily partitions of push.deliveries. Maintenance creates them ahead of time and retention drops whole
-- partitions, never bulk DELETEs. SECURITY DEFINER so the worker role can run them without owning the table.

CREATE FUNCTION push.ensure_delivery_partitions(days_ahead integer DEFAULT 3) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
DECLARE
    day     date;
    name    text;
    created integer := 0;
BEGIN
    FOR i IN 0 .. greatest(days_ahead, 0) LOOP
        day := (now() AT TIME ZONE 'UTC')::date + i;
        name := 'deliveries_' || to_char(day, 'YYYYMMDD');
        IF to_regclass('push.' || name) IS NULL THEN
            -- A default partition that already holds rows for this day would block the new partition; such
            -- rows only exist if maintenance was down, and they stay where they are (the default partition).
            BEGIN
                EXECUTE format(
                    'CREATE TABLE push.%I PARTITION OF push.deliveries FOR VALUES FROM (%L) TO (%L) '
                    'WITH (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0)',
                    name, (day::timestamp AT TIME ZONE 'UTC'), ((day + 1)::timestamp AT TIME ZONE 'UTC'));
                created := created + 1;
            EXCEPTION WHEN check_violation OR duplicate_table THEN
                NULL;
            END;
        END IF;
    END LOOP;
    RETURN created;
END;
$$;

-- Drops daily partitions whose whole day is older than `keep`. Returns how many were dropped.
CREATE FUNCTION push.drop_delivery_partitions(keep interval) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
DECLARE
    part    record;
    dropped integer := 0;
BEGIN
    FOR part IN
        SELECT c.relname
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'push.deliveries'::regclass
           AND c.relname ~ '^deliveries_[0-9]{8}$'
           AND to_date(substr(c.relname, 12), 'YYYYMMDD') + 1 <= (now() - keep)::date
    LOOP
        EXECUTE format('DROP TABLE push.%I', part.relname);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END;
$$;

SELECT push.ensure_delivery_partitions(3);
