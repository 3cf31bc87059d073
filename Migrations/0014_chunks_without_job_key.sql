-- push.chunks no longer has a foreign key to push.jobs. PostgreSQL checks a foreign key with a plan it caches
-- in each session, and keeps it until the referenced table is next analyzed. Planned while push.jobs held a
-- handful of rows, the check is a sequential scan, and it then ran once for every chunk the worker inserted:
-- as push.jobs grew to 20,000 rows during a mixed run, expanding one-user jobs cost 1.7 ms each instead of
-- 40 µs, and priority-10 notifications waited seconds until autovacuum replaced the plan. The cascade on delete
-- had the same cached plan against push.chunks, once per deleted job.
--
-- Chunks are written only by the worker, for jobs it has just locked, and retention, the one place that
-- deletes jobs, deletes any chunks they still have in the same statement.
ALTER TABLE push.chunks DROP CONSTRAINT chunks_job_id_fkey;
