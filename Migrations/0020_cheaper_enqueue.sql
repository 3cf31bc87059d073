-- push.enqueue of a one-token job, cheaper in database time: an explicit token list cost about 0.1 ms more than
-- a user audience (BENCHMARKS.md). Nothing a producer or worker sees changes.

-- push.token_platform as in 0009: the same rule, cheaper to run. PostgreSQL's regular expressions expand a
-- bounded repetition such as {64,200} into that many states, so each match of '^[0-9A-Fa-f]{64,200}$' took
-- tens of microseconds; the length is checked apart and the characters with an unbounded '+', which matches
-- the same tokens. Without SET search_path (every name in it is qualified) the planner inlines the function
-- into its callers, push.validate_job and the worker's expansion, instead of running it as a query of its own
-- for each token.
CREATE OR REPLACE FUNCTION push.token_platform(token text, has_apns boolean, has_fcm boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN has_apns AND pg_catalog.length(token) OPERATOR(pg_catalog.>=) 64
                     AND pg_catalog.length(token) OPERATOR(pg_catalog.<=) 200
                     AND token OPERATOR(pg_catalog.~) '^[0-9A-Fa-f]+$' THEN 'ios'
                WHEN has_fcm AND pg_catalog.length(token) OPERATOR(pg_catalog.>=) 16
                     AND pg_catalog.length(token) OPERATOR(pg_catalog.<=) 1024
                     AND token OPERATOR(pg_catalog.~) '^[A-Za-z0-9_:-]+$' THEN 'android' END
$$;
