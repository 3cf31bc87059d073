import Foundation
import PGPushTestSupport
import PostgresNIO
import Testing

/// push.validate_job checks the common job on a fast path before its full checks (migration 0022). The fast path
/// must store and refuse exactly what the full checks do: every case here runs with the function as migrated and
/// with the fast path cut out of it, and both must give the same stored row or the same error.
@Suite(.database, .timeLimit(.minutes(3)))
struct EnqueueFastPathTests {
    /// Statements that store one job (returning its id) or fail: the common job, each limit on either side,
    /// other apps, other audiences, and direct inserts that set columns only workers own.
    static let cases: [String] = [
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ARRAY[repeat('A',64)])"#,
        #"SELECT push.enqueue('capp', '{"aps":{"alert":"x"}}', tokens => ARRAY[repeat('b',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ARRAY[repeat('A',63)])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ARRAY[repeat('g',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ARRAY[NULL::text])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ARRAY[]::text[])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ARRAY[repeat('B',64), repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ARRAY[[repeat('B',64)]])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ('[3:3]={' || repeat('C',64) || '}')::text[])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', user_ids => ARRAY['u1'])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', user_ids => ARRAY[]::text[])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', user_ids => ARRAY['u', NULL])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tags => ARRAY['t'])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', tokens => ARRAY[repeat('a',64)], user_ids => ARRAY['u'])"#,
        #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}')"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', push_type => 'background', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', push_type => 'background', apns_priority => 10, tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', push_type => 'background', apns_priority => 1, tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', apns_priority => 7, tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 4500))), push_type => 'voip', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 4500))), tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 4062))), tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 4063))), tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', push_type => 'bogus', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', push_type => 'liveactivity', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', NULL, tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '[1]', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"x":1}', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', collapse_id => repeat('c', 64), tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', collapse_id => repeat('c', 65), tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', idempotency_key => repeat('k', 256), tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', idempotency_key => 'k1', tokens => ARRAY[repeat('a',64)]) + 0 * push.enqueue('app', '{"aps":{}}', idempotency_key => 'k1', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', expires_at => now() - interval '1 s', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', send_at => now() + interval '1 h', expires_at => now() + interval '1 min', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', expires_at => now() + interval '1 h', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', send_at => NULL, tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', priority => NULL, tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('nope', '{"aps":{}}', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue(NULL, '{"aps":{}}', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('app', '{"aps":{}}', fcm => '{}', tokens => ARRAY[repeat('a',64)])"#,
        #"SELECT push.enqueue('fapp', '{"aps":{"alert":"hi"}}', tokens => ARRAY['AbC_def-1234567890:xyz'])"#,
        #"SELECT push.enqueue('fapp', '{"aps":{"alert":"hi"}}', tokens => ARRAY[repeat('A',64)])"#,
        #"INSERT INTO push.jobs (app_id, payload, tokens, state, delivered, failure_reason) VALUES ('app', '{"aps":{}}', ARRAY[repeat('A',64)], 'running', 5, 'x') RETURNING id"#,
        #"INSERT INTO push.jobs (app_id, payload, tokens, created_at, audience_kind, channel_id, total, prune_suppressed) VALUES ('app', '{"aps":{}}', ARRAY[repeat('A',64)], now() - interval '1 d', 'activity', 'ch', 3, true) RETURNING id"#,
        #"INSERT INTO push.jobs (app_id, payload, tokens, push_type, apns_priority) VALUES ('app', '{"aps":{}}', ARRAY[repeat('A',64)], 'alert', 7) RETURNING id"#,
        #"INSERT INTO push.jobs (app_id, payload, tokens, push_type, apns_priority, priority) VALUES ('app', '{"aps":{}}', ARRAY[repeat('A',64)], 'location', 5, 3) RETURNING id"#,
        #"INSERT INTO push.jobs (app_id, payload, tokens, bad_device_tokens, started_at) VALUES ('app', '{"aps":{}}', ARRAY[repeat('A',64)], 2, now()) RETURNING id"#,
        #"INSERT INTO push.jobs (app_id, payload, tags, send_at) VALUES ('app', '{"aps":{}}', ARRAY['a','b'], NULL) RETURNING id"#,
        #"INSERT INTO push.jobs (app_id, payload, user_ids, push_type) VALUES ('app', '{"aps":{}}', ARRAY['a','b'], 'widgets') RETURNING id"#,
        #"INSERT INTO push.jobs (app_id, payload, activity_ids) VALUES ('app', '{"aps":{}}', ARRAY['a']) RETURNING id"#,
        #"INSERT INTO push.jobs (app_id, payload, tokens) VALUES ('app', '{"aps":{}}', ARRAY['Z']) RETURNING id"#,
    ]

    /// A case's result: the stored row without its id and timestamps, or the error's SQLSTATE, message and
    /// column. The case is always rolled back, so every case starts from the same table.
    static let caseOutcome = #"""
        CREATE FUNCTION pg_temp.case_outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
        DECLARE
            job_id bigint;
            stored jsonb;
            state text;
            message text;
            field text;
        BEGIN
            BEGIN
                EXECUTE statement INTO job_id;
                SELECT to_jsonb(j) INTO stored FROM push.jobs j WHERE j.id = job_id;
                stored := coalesce(stored, '{}') - 'id' - 'created_at' - 'send_at'
                    || jsonb_build_object('created_now', (stored ->> 'created_at')::timestamptz = now(),
                                          'send_now', (stored ->> 'send_at')::timestamptz = now());
                RAISE EXCEPTION USING ERRCODE = 'P0099', MESSAGE = stored::text;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, field = COLUMN_NAME;
                RETURN state || ' | ' || message || ' | ' || coalesce(field, '');
            END;
        END $$
        """#

    /// Every case's outcome, with the fast path cut out of push.validate_job when `fullChecksOnly`; the
    /// replacement is rolled back with the cases.
    static let outcomes = #"""
        CREATE FUNCTION pg_temp.outcomes(statements text[], full_checks_only boolean) RETURNS text[] LANGUAGE plpgsql AS $$
        DECLARE
            results text[] := '{}';
            statement text;
            definition text := pg_get_functiondef('push.validate_job'::regproc);
            without_fast_path text;
        BEGIN
            BEGIN
                IF full_checks_only THEN
                    without_fast_path := regexp_replace(definition, '\n    -- fast path: begin\n.*\n    -- fast path: end\n', E'\n', 's');
                    IF without_fast_path = definition THEN
                        RAISE EXCEPTION 'push.validate_job has no "-- fast path: begin/end" block to cut out';
                    END IF;
                    EXECUTE without_fast_path;
                END IF;
                FOREACH statement IN ARRAY statements LOOP
                    results := results || pg_temp.case_outcome(statement);
                END LOOP;
                RAISE EXCEPTION USING ERRCODE = 'P0098';
            EXCEPTION WHEN SQLSTATE 'P0098' THEN
                NULL;
            END;
            RETURN results;
        END $$
        """#

    @Test func theFastPathStoresAndRefusesExactlyWhatTheFullChecksDo() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.exec("INSERT INTO push.apps (id, fcm_project_id, fcm_service_account_path) VALUES ('fapp', 'proj-1', '/tmp/sa.json')")
            try await db.exec("INSERT INTO push.apps (id, topic, certificate_path) VALUES ('capp', 'com.c', '/tmp/c.p12')")
            try await db.client.withConnection { connection in
                // Temporary functions live in one session: every statement here runs on this connection.
                try await connection.query(PostgresQuery(unsafeSQL: Self.caseOutcome), logger: db.logger)
                try await connection.query(PostgresQuery(unsafeSQL: Self.outcomes), logger: db.logger)
                // One statement, so both runs share now(): the stored timestamps and the messages quoting them match.
                let rows = try await connection.query(
                    "SELECT pg_temp.outcomes(\(Self.cases), false), pg_temp.outcomes(\(Self.cases), true)", logger: db.logger)
                var withFastPath: [String] = []
                var fullChecks: [String] = []
                for try await (fast, full) in rows.decode(([String], [String]).self) { (withFastPath, fullChecks) = (fast, full) }
                #expect(withFastPath.count == Self.cases.count)
                for (index, statement) in Self.cases.enumerated() where index < min(withFastPath.count, fullChecks.count) {
                    #expect(withFastPath[index] == fullChecks[index], "\(statement)")
                }
                // The common job is stored, with its token lowercased, on both paths.
                #expect(withFastPath.first?.hasPrefix("P0099 | {") == true)
                #expect(withFastPath.first?.contains(String(repeating: "a", count: 64)) == true)
            }
        }
    }
}
