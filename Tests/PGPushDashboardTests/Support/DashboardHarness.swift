import Foundation
import Logging
import PGPushDashboard
import PGPushStore
import PGPushTestSupport
import PostgresNIO

/// A dashboard served in-process on a free port, over a running client, for the length of `body`.
enum DashboardHarness {
    struct Running: Sendable {
        let base: String
        let server: DashboardServer

        /// A page's JSON export as rows of column → value.
        func json(_ path: String, table: String, credentials: (String, String)? = nil) async throws -> [[String: Any]] {
            let separator = path.contains("?") ? "&" : "?"
            let reply = try await HTTPClient.send("GET", base + path + separator + "format=json&table=\(table)", credentials: credentials)
            guard reply.status == 200 else { throw HarnessFailure("GET \(path) answered \(reply.status): \(reply.body)") }
            return try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as! [[String: Any]]
        }
    }

    struct HarnessFailure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static func configuration(_ change: (inout DashboardConfiguration) -> Void = { _ in }) -> DashboardConfiguration {
        var configuration = DashboardConfiguration()
        configuration.port = 0
        // Short, so a test sees a change without waiting; the sharing itself is what the cache test checks.
        configuration.overviewCacheTTL = .milliseconds(200)
        change(&configuration)
        return configuration
    }

    static func with<T: Sendable>(
        _ configuration: DashboardConfiguration, client: PostgresClient, logger: Logger,
        _ body: @Sendable (Running) async throws -> T
    ) async throws -> T {
        let server = try DashboardServer(configuration: configuration, client: client, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            defer { group.cancelAll() }
            let deadline = ContinuousClock.now + .seconds(10)
            while server.localPort == nil {
                guard ContinuousClock.now < deadline else { throw HarnessFailure("the dashboard did not start listening") }
                try await Task.sleep(for: .milliseconds(20))
            }
            return try await body(Running(base: "http://127.0.0.1:\(server.localPort!)\(configuration.basePath)", server: server))
        }
    }
}

/// What the suites seed, with SQL, as the cluster's superuser.
enum Seed {
    static let iosCount = 1500
    static let androidCount = 500
    static let scriptPayload = #"{"aps":{"alert":"<script>alert('payload')</script>"}}"#
    static let scriptReason = #"BadTopic <script>alert("reason")</script>"#

    struct Jobs: Sendable {
        /// The finished broadcast to 1,500 iOS and 500 Android devices.
        let broadcast: Int64
        /// A failed job of `news` with BadDeviceToken and Unregistered answers, one token pruned.
        let failed: Int64
        /// A queued job of `news` whose payload carries `<script>`.
        let queued: Int64
    }

    /// Apps `mixed` (APNs and FCM) and `news` (paused, its reason carrying `<script>`), 2,000 devices of `mixed`,
    /// their outcomes, one pruned device, one audit row.
    static func standard(_ db: TestDatabase) async throws -> Jobs {
        try await db.execute("""
            INSERT INTO push.apps (id, topic, environment, team_id, key_id, private_key_path, fcm_project_id,
                                   fcm_service_account_path, rate_limit)
            VALUES ('mixed', 'com.example.mixed', 'production', 'ABCDE12345', 'KEY1234567', 'k.p8', 'demo-project', 'sa.json', 500),
                   ('news', 'com.example.news', 'sandbox', 'ABCDE12345', 'KEY1234567', 'k.p8', NULL, NULL, NULL)
            """)
        try await db.execute("UPDATE push.apps SET paused_reason = \(scriptReason), paused_at = now() WHERE id = 'news'")
        try await db.execute("""
            INSERT INTO push.devices (app_id, token, platform)
            SELECT 'mixed', lpad(to_hex(i), 64, '0'), 'ios' FROM generate_series(1, \(iosCount)) i
            UNION ALL
            SELECT 'mixed', 'fcm-token-' || lpad(i::text, 8, '0'), 'android' FROM generate_series(1, \(androidCount)) i
            """)
        let broadcast = try await db.scalar(Int64.self, "SELECT push.enqueue('mixed', '{\"aps\":{\"alert\":\"hello\"}}')")
        try await db.execute("""
            UPDATE push.jobs SET state = 'done', total = \(iosCount + androidCount), android_total = \(androidCount),
                   delivered = \(iosCount + androidCount), android_delivered = \(androidCount),
                   started_at = now() - interval '3 minutes', first_sent_at = now() - interval '3 minutes',
                   finished_at = now() - interval '2 minutes'
             WHERE id = \(broadcast)
            """)
        try await db.execute("""
            INSERT INTO push.deliveries (job_id, app_id, token, status, reason, attempt, sent_at, platform)
            SELECT \(broadcast), app_id, token, 200, NULL, 1, now() - interval '150 seconds', platform
              FROM push.devices WHERE app_id = 'mixed'
            """)

        let tokens = (1...3).map { String(repeating: "b", count: 63) + String($0) }
        let failed = try await db.scalar(Int64.self, "SELECT push.enqueue('news', '{\"aps\":{\"alert\":\"x\"}}', tokens => \(tokens))")
        try await db.execute("""
            UPDATE push.jobs SET state = 'failed', total = 3, failed = 3, pruned = 1, started_at = now() - interval '1 minute',
                   first_sent_at = now() - interval '1 minute', finished_at = now() WHERE id = \(failed)
            """)
        try await db.execute("""
            INSERT INTO push.deliveries (job_id, app_id, token, status, reason, attempt, sent_at, platform)
            VALUES (\(failed), 'news', \(tokens[0]), 400, 'BadDeviceToken', 1, now() - interval '60 seconds', 'ios'),
                   (\(failed), 'news', \(tokens[1]), 400, 'BadDeviceToken', 1, now() - interval '60 seconds', 'ios'),
                   (\(failed), 'news', \(tokens[2]), 410, 'Unregistered', 1, now() - interval '60 seconds', 'ios')
            """)
        try await db.execute("""
            INSERT INTO push.pruned_devices (app_id, token, reason, job_id) VALUES ('news', \(tokens[2]), 'Unregistered', \(failed))
            """)
        let queued = try await db.scalar(
            Int64.self, "SELECT push.enqueue('news', \(scriptPayload)::jsonb, tokens => \([String(repeating: "c", count: 64)]))")
        try await db.execute("""
            INSERT INTO push.operator_audit (action, app_id, detail) VALUES ('confirm_stale_audience', 'news', 'note <b>stale</b>')
            """)
        return Jobs(broadcast: broadcast, failed: failed, queued: queued)
    }
}

extension TestDatabase {
    /// Runs one statement; a server error comes out with PostgreSQL's message (PSQLError's own text is redacted).
    func execute(_ query: PostgresQuery) async throws {
        do {
            _ = try await client.query(query, logger: logger).collect()
        } catch {
            throw DashboardHarness.HarnessFailure("\(query.sql): \(serverMessage(of: error) ?? String(reflecting: error))")
        }
    }

    func scalar<T: PostgresDecodable & Sendable>(_ type: T.Type, _ query: PostgresQuery) async throws -> T {
        let rows: [PostgresRow]
        do {
            rows = try await client.query(query, logger: logger).collect()
        } catch {
            throw DashboardHarness.HarnessFailure("\(query.sql): \(serverMessage(of: error) ?? String(reflecting: error))")
        }
        guard let row = rows.first else {
            throw DashboardHarness.HarnessFailure("no row")
        }
        return try row.decode(T.self)
    }

    func strings(_ query: PostgresQuery) async throws -> [String] {
        try await client.query(query, logger: logger).collect().map { try $0.decode(String.self) }
    }
}
