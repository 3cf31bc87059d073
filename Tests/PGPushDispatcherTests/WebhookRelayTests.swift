import Crypto
import Foundation
import Hummingbird
import HummingbirdTLS
import Logging
import NIOSSL
import PGPushCore
import PGPushDevelopment
@testable import PGPushDispatcher
import PGPushSimulator
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Synchronization
import Testing

// MARK: - The pure parts (fast tier)

@Suite struct WebhookRelayUnitTests {
    @Test func theBodyIsTheDocumentedJSONInThatOrder() throws {
        let event = WebhookEvent(
            id: 42, appID: "news", jobID: 7, at: "2026-03-01T12:00:00.123456Z", event: "job_done",
            body: #"{"failed": 0, "delivered": 3}"#)
        #expect(WebhookMessage.json(event)
            == #"{"id":42,"app_id":"news","job_id":7,"at":"2026-03-01T12:00:00.123456Z","event":"job_done","body":{"failed": 0, "delivered": 3}}"#)
        let bare = WebhookEvent(id: 1, appID: nil, jobID: nil, at: "2026-03-01T12:00:00.000000Z", event: "devices_pruned", body: nil)
        let text = WebhookMessage.json(bare)
        #expect(text == #"{"id":1,"app_id":null,"job_id":null,"at":"2026-03-01T12:00:00.000000Z","event":"devices_pruned","body":{}}"#)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(Set(object.keys) == ["id", "app_id", "job_id", "at", "event", "body"])
    }

    @Test func stringsAreEscapedAsJSON() throws {
        let tricky = "a\"b\\c\nd\te\u{01}f é 🚀"
        let quoted = WebhookMessage.quoted(tricky)
        #expect(quoted == #""a\"b\\c\nd\te\u0001f é 🚀""#)
        let event = WebhookEvent(id: 3, appID: tricky, jobID: nil, at: "x", event: "app_paused", body: #"{"reason": "x"}"#)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(WebhookMessage.json(event).utf8)) as? [String: Any])
        #expect(object["app_id"] as? String == tricky)
    }

    @Test func theSignatureIsTheLowercaseHexHMACSHA256OfTheExactBody() {
        // RFC 4231, test case 2.
        #expect(WebhookMessage.hmacHex(Array("what do ya want for nothing?".utf8), secret: Array("Jefe".utf8))
            == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let event = WebhookEvent(id: 9, appID: "a", jobID: 1, at: "t", event: "job_failed", body: "{}")
        let secret = Array("s3cret".utf8)
        let message = WebhookMessage(event: event, secret: secret)
        let expected = HMAC<SHA256>.authenticationCode(for: message.body, using: SymmetricKey(data: secret))
            .map { String(format: "%02x", $0) }.joined()
        #expect(message.signature == "sha256=" + expected)
        #expect(message.body == Array(WebhookMessage.json(event).utf8))
        let headers = Dictionary(message.headers, uniquingKeysWith: { first, _ in first })
        #expect(headers["Content-Type"] == "application/json")
        #expect(headers["X-PGPush-Event-Id"] == "9")
        #expect(headers["X-PGPush-Signature"] == message.signature)
        #expect(WebhookMessage(event: event, secret: Array("other".utf8)).signature != message.signature)
    }

    @Test func theEventsFlag() throws {
        #expect(try WebhookConfiguration.parseEvents("job_done,job_failed") == ["job_done", "job_failed"])
        #expect(try WebhookConfiguration.parseEvents(" job_done , job_done,app_paused ") == ["job_done", "app_paused"])
        #expect(try WebhookConfiguration.parseEvents(WebhookConfiguration.eventNames.joined(separator: ",")) == WebhookConfiguration.eventNames)
        #expect(throws: PGPushError.self) { try WebhookConfiguration.parseEvents("job_done,job_exploded") }
        #expect(throws: PGPushError.self) { try WebhookConfiguration.parseEvents(" , ") }
    }

    @Test func theURLFlag() throws {
        #expect(try WebhookConfiguration.parseURL("https://crm.example.com/hooks/pgpush?x=1").host == "crm.example.com")
        #expect(try WebhookConfiguration.parseURL("http://127.0.0.1:8080/hook").port == 8080)
        for bad in ["ftp://example.com/x", "crm.example.com/hook", "https:///nohost", ""] {
            #expect(throws: PGPushError.self, "\(bad)") { try WebhookConfiguration.parseURL(bad) }
        }
    }

    @Test func theSecretComesFromItsVariableAndMissingOrEmptyIsRefused() throws {
        #expect(try WebhookConfiguration.secret(fromVariable: "HOOK", in: ["HOOK": "abc"]) == Array("abc".utf8))
        do {
            _ = try WebhookConfiguration.secret(fromVariable: "HOOK", in: [:])
            Issue.record("a missing variable was accepted")
        } catch {
            #expect(error.message.contains("HOOK") && error.message.contains("not set"))
        }
        do {
            _ = try WebhookConfiguration.secret(fromVariable: "HOOK", in: ["HOOK": ""])
            Issue.record("an empty variable was accepted")
        } catch {
            #expect(error.message.contains("HOOK") && error.message.contains("empty"))
        }
    }

    @Test func theLoggedURLCarriesNoCredential() throws {
        let configuration = WebhookConfiguration(
            url: try WebhookConfiguration.parseURL("https://user:hunter2@crm.example.com:8443/hooks?token=hunter3"),
            secret: [1], name: "crm")
        #expect(!configuration.loggableURL.contains("hunter"))
        #expect(configuration.loggableURL.contains("crm.example.com:8443/hooks"))
    }

    @Test func aFailingReceiverIsLoggedOncePerProblemAndThenRateLimited() {
        let start = ContinuousClock.now
        var log = WebhookFailureLog(reportEvery: .seconds(30))
        #expect(log.delivered(eventID: 1, at: start) == nil, "a first-time delivery says nothing")
        #expect(log.failed(eventID: 2, problem: "HTTP 500", at: start) == .failing(eventID: 2, problem: "HTTP 500", attempts: 1, since: start))
        #expect(log.failed(eventID: 2, problem: "HTTP 500", at: start + .seconds(1)) == nil)
        #expect(log.failed(eventID: 2, problem: "HTTP 500", at: start + .seconds(29)) == nil)
        #expect(log.failed(eventID: 2, problem: "HTTP 500", at: start + .seconds(31))
            == .failing(eventID: 2, problem: "HTTP 500", attempts: 4, since: start))
        // A different failure is news.
        #expect(log.failed(eventID: 2, problem: "no answer within 10 s", at: start + .seconds(32))
            == .failing(eventID: 2, problem: "no answer within 10 s", attempts: 5, since: start))
        #expect(log.delivered(eventID: 2, at: start + .seconds(40)) == .recovered(eventID: 2, attempts: 6, after: .seconds(40)))
        #expect(log.failedAttempts == 0)
        #expect(log.failed(eventID: 3, problem: "HTTP 500", at: start + .seconds(41)) != nil, "a new outage is reported at once")
    }

    @Test func theBackoffIsCappedExponentialWithJitter() {
        let policy = WebhookConfiguration(url: URL(string: "http://x/")!, secret: [1], name: "n").retryPolicy
        #expect(policy.delayCap(beforeAttempt: 2) == .seconds(1))
        #expect(policy.delayCap(beforeAttempt: 4) == .seconds(4))
        #expect(policy.delayCap(beforeAttempt: 8) == .seconds(30))
        #expect(policy.delayCap(beforeAttempt: 10_000) == .seconds(30), "forever, never past the cap")
        var generator = SystemRandomNumberGenerator()
        let delays = (0..<50).map { _ in policy.delay(beforeAttempt: 6, using: &generator) }
        #expect(delays.allSatisfy { $0 >= .zero && $0 <= .seconds(16) })
        #expect(Set(delays).count > 1, "jittered")
    }

    @Test func aWakeEndsTheWaitAndASignalWithNobodyWaitingIsKept() async {
        let wake = RelayWake()
        let started = ContinuousClock.now
        await wake.wait(upTo: .milliseconds(50))
        #expect(ContinuousClock.now - started >= .milliseconds(45), "times out")
        wake.signal()
        wake.signal()
        let kept = ContinuousClock.now
        await wake.wait(upTo: .seconds(30))
        #expect(ContinuousClock.now - kept < .seconds(5), "the kept signal ends the next wait")
        let coalesced = ContinuousClock.now
        await wake.wait(upTo: .milliseconds(50))
        #expect(ContinuousClock.now - coalesced >= .milliseconds(45), "two signals are one")
        let waiting = ContinuousClock.now
        async let waited: Void = wake.wait(upTo: .seconds(30))
        try? await Task.sleep(for: .milliseconds(50))
        wake.signal()
        await waited
        #expect(ContinuousClock.now - waiting < .seconds(5), "a signal ends a running wait")
    }
}

// MARK: - The relay as a process, against PostgreSQL and a receiver

extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct WebhookRelayTests {
        /// Every event committed after a new relay's start reaches the receiver once, in id order, each POST's
        /// signature valid over its exact body; events from before its first start are not sent (a new cursor
        /// starts at the newest event). The relay logs in with pgpush_webhook only, and a NOTIFY on --listen-url
        /// wakes it (its poll is set to a minute here, so nothing would arrive in time without LISTEN).
        @Test func deliversEveryEventOnceInOrderWithValidSignatures() async throws {
            try await TestDatabase.with { db in
                let jobs = try await WebhookFixture.prepare(db)
                let earlier = try await WebhookFixture.insertEvents(db, 20, jobs: jobs)
                try await WebhookReceiver.with { receiver, url in
                    let login = try await db.createLogin(memberOf: "pgpush_webhook")
                    let relay = try RelayProcess(
                        db: db.urlString(user: login), receiver: url, name: "crm",
                        extra: ["--listen-url", db.urlString(user: login), "--poll-interval", "60"])
                    try await db.waitUntil(
                        "SELECT coalesce((SELECT last_event_id FROM push.webhook_cursors WHERE name = 'crm'), -1)",
                        is: earlier.max()!, timeout: .seconds(30))
                    for round in 0..<10 {
                        try await WebhookFixture.insertEvents(db, 1 + round * 5, jobs: jobs)
                        // And events the schema's own triggers write: an app paused and resumed, a job cancelled.
                        try await db.exec("UPDATE push.apps SET paused_reason = 'maintenance' WHERE id IN ('a', 'b')")
                        try await db.exec("UPDATE push.apps SET paused_reason = NULL WHERE id IN ('a', 'b')")
                        if round < jobs.count { try await db.exec("SELECT push.cancel(\(jobs[round]))") }
                        try await Task.sleep(for: .milliseconds(30))
                    }
                    let ids = try await Self.ids(db, "SELECT id FROM push.job_events WHERE id > \(earlier.max()!) ORDER BY id")
                    #expect(ids.count >= 235)
                    try await eventually(timeout: .seconds(60), relay.log) { receiver.acceptedIDs.count >= ids.count }
                    #expect(receiver.acceptedIDs == ids.sorted())
                    #expect(receiver.requests.allSatisfy { $0.signatureValid }, "every signature checks")
                    #expect(receiver.requests.allSatisfy { $0.headerEventID == $0.eventID }, "X-PGPush-Event-Id is the body's id")
                    #expect(receiver.requests.allSatisfy { $0.contentType == "application/json" })
                    #expect(receiver.requests.allSatisfy { $0.status == 200 })

                    // Each body, field by field, against its row.
                    let rows = try await db.rows("""
                        SELECT id, app_id, job_id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), event, body::text
                          FROM push.job_events WHERE id = ANY(\(ids))
                        """)
                    let requests = Dictionary(receiver.requests.map { ($0.eventID, $0) }, uniquingKeysWith: { first, _ in first })
                    var compared = 0
                    for try await (id, appID, jobID, at, event, body) in rows.decode((Int64, String?, Int64?, String, String, String).self) {
                        let object = try #require(requests[id]?.json, "event \(id)")
                        #expect(Set(object.keys) == ["id", "app_id", "job_id", "at", "event", "body"])
                        #expect((object["id"] as? NSNumber)?.int64Value == id)
                        #expect(object["app_id"] as? String == appID)
                        #expect((object["job_id"] as? NSNumber)?.int64Value == jobID)
                        #expect(object["at"] as? String == at)
                        #expect(object["event"] as? String == event)
                        let expected = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? NSDictionary
                        #expect((object["body"] as? NSDictionary) == expected)
                        compared += 1
                    }
                    #expect(compared == ids.count)
                    try await db.waitUntil("SELECT last_event_id FROM push.webhook_cursors WHERE name = 'crm'", is: ids.max()!)

                    relay.signal(SIGTERM)
                    #expect(await relay.waitForExit(timeout: .seconds(20)) == 0, "\(relay.log.suffix(1500))")
                    #expect(!relay.log.contains(WebhookFixture.secret), "the secret is never logged")
                    #expect(relay.log.contains("webhook relay started"))
                }
            }
        }

        /// The receiver answers 500 for its first 3 seconds, and the relay is killed with SIGKILL mid-stream and
        /// started again: every event arrives, in order, with no gap; only the event at the kill may arrive twice.
        /// While the receiver fails, the relay retries the first event only (nothing overtakes it) and logs the
        /// failure once, not once per attempt.
        @Test func survivesAFailingReceiverAndASIGKILLWithoutAGap() async throws {
            try await TestDatabase.with { db in
                let jobs = try await WebhookFixture.prepare(db)
                // A cursor made beforehand: this relay starts at the beginning.
                try await db.exec("INSERT INTO push.webhook_cursors (name) VALUES ('kill')")
                let first = try await WebhookFixture.insertEvents(db, 150, jobs: jobs)
                try await WebhookReceiver.with(failFor: .seconds(3)) { receiver, url in
                    let start = { (tag: String) in
                        try RelayProcess(db: db.urlString, receiver: url, name: "kill", extra: ["--listen-url", db.urlString], tag: tag)
                    }
                    let relay = try start("first")
                    let producer = Task {
                        var ids: [Int64] = []
                        for _ in 0..<15 {
                            ids += try await WebhookFixture.insertEvents(db, 10, jobs: jobs)
                            try await Task.sleep(for: .milliseconds(300))
                        }
                        return ids
                    }
                    try await eventually(timeout: .seconds(90), relay.log) { receiver.acceptedIDs.count >= 100 }
                    relay.signal(SIGKILL)
                    _ = await relay.waitForExit(timeout: .seconds(10))
                    let acceptedBeforeKill = receiver.acceptedIDs
                    let second = try start("second")
                    let all = (first + (try await producer.value)).sorted()
                    try await eventually(timeout: .seconds(90), second.log) { Set(receiver.acceptedIDs).isSuperset(of: all) }
                    try await db.waitUntil("SELECT last_event_id FROM push.webhook_cursors WHERE name = 'kill'", is: all.max()!)

                    let accepted = receiver.acceptedIDs
                    #expect(Self.firstOccurrences(accepted) == all, "in order, no gap")
                    let repeated = Dictionary(grouping: accepted, by: { $0 }).filter { $0.value.count > 1 }.keys
                    #expect(repeated.count <= 1, "repeated: \(repeated.sorted())")
                    if let id = repeated.first {
                        #expect(id == acceptedBeforeKill.last, "only the event at the kill is repeated")
                        #expect(accepted.count == all.count + 1)
                    }
                    #expect(receiver.requests.allSatisfy { $0.signatureValid })

                    let refused = receiver.requests.filter { $0.status == 500 }
                    print("webhook kill test: \(accepted.count) accepted for \(all.count) events, repeated \(repeated.sorted()), \(refused.count) answered 500")
                    #expect(refused.count >= 2, "the relay retried while the receiver failed")
                    #expect(Set(refused.map(\.eventID)) == [all[0]], "nothing overtakes the failing event")
                    let failures = relay.log.components(separatedBy: "webhook delivery failed").count - 1
                    #expect((1...2).contains(failures), "logged once (rate-limited), not per attempt: \(relay.log.suffix(2000))")
                    #expect(relay.log.contains("HTTP 500"))
                    #expect(relay.log.contains("webhook receiver answers again"))

                    second.signal(SIGTERM)
                    #expect(await second.waitForExit(timeout: .seconds(20)) == 0, "\(second.log.suffix(1500))")
                }
            }
        }

        /// --events and --app: only matching events are sent, in order, and the ones left out still move the
        /// cursor, up to the newest event even when the last ones all are left out.
        @Test func deliversOnlyTheChosenEventsAndAppsAndSkipsTheRest() async throws {
            try await TestDatabase.with { db in
                let jobs = try await WebhookFixture.prepare(db)
                try await db.exec("INSERT INTO push.webhook_cursors (name) VALUES ('ops')")
                let before = try await WebhookFixture.insertEvents(db, 120, apps: ["a", "b", "c"], jobs: jobs)
                try await WebhookReceiver.with { receiver, url in
                    let relay = try RelayProcess(
                        db: db.urlString, receiver: url, name: "ops",
                        extra: ["--events", "job_done,job_failed", "--app", "a", "--app", "b"])
                    var ids = before
                    ids += try await WebhookFixture.insertEvents(db, 40, apps: ["a", "b", "c"], jobs: jobs)
                    // The newest events are all left out.
                    ids += try await WebhookFixture.insertEvents(db, 10, names: ["job_started", "app_paused"], apps: ["a"], jobs: jobs)
                    let expected = try await Self.ids(db, """
                        SELECT id FROM push.job_events
                         WHERE event IN ('job_done', 'job_failed') AND app_id IN ('a', 'b') ORDER BY id
                        """)
                    #expect(expected.count >= 20)
                    try await db.waitUntil("SELECT last_event_id FROM push.webhook_cursors WHERE name = 'ops'", is: ids.max()!, timeout: .seconds(60))
                    #expect(receiver.acceptedIDs == expected)
                    let events = Set(receiver.requests.compactMap { $0.json?["event"] as? String })
                    let apps = Set(receiver.requests.compactMap { $0.json?["app_id"] as? String })
                    #expect(events.isSubset(of: ["job_done", "job_failed"]))
                    #expect(apps.isSubset(of: ["a", "b"]))
                    relay.signal(SIGTERM)
                    #expect(await relay.waitForExit(timeout: .seconds(20)) == 0, "\(relay.log.suffix(1500))")
                }
            }
        }

        /// PostgreSQL stopped for three seconds mid-stream, under two relays: one through PgBouncer in
        /// transaction pooling, polling (its statements wait in the pooler), and one connected directly with LISTEN
        /// (its connections break; it reconnects with backoff). Each waits the restart out and goes on where it
        /// was: every event once, in order, no gap.
        @Test func worksThroughPgBouncerAndSurvivesAPostgreSQLRestart() async throws {
            let cluster = try ThrowawayPostgres.start()
            defer { cluster.stop() }
            try await TestDatabase.with(cluster: try DatabaseURL(cluster.url)) { db in
                let bouncer = try ThrowawayPgBouncer.start(targetPort: cluster.port, poolMode: "transaction", poolSize: 2)
                defer { bouncer.stop() }
                let jobs = try await WebhookFixture.prepare(db)
                try await db.exec("INSERT INTO push.webhook_cursors (name) VALUES ('pooled'), ('direct')")
                let first = try await WebhookFixture.insertEvents(db, 80, jobs: jobs)
                // Receivers slow enough that the restart lands mid-stream.
                try await WebhookReceiver.with(delay: .milliseconds(40)) { pooledReceiver, pooledURL in
                    try await WebhookReceiver.with(delay: .milliseconds(40)) { directReceiver, directURL in
                        let pooled = try RelayProcess(db: bouncer.url(database: db.name), receiver: pooledURL, name: "pooled", tag: "pooled")
                        let direct = try RelayProcess(
                            db: db.urlString, receiver: directURL, name: "direct", extra: ["--listen-url", db.urlString], tag: "direct")
                        try await eventually(timeout: .seconds(60), pooled.log + direct.log) {
                            pooledReceiver.acceptedIDs.count >= 20 && directReceiver.acceptedIDs.count >= 20
                        }
                        try cluster.stopServer()
                        try await Task.sleep(for: .seconds(3))
                        try cluster.startServer()
                        var more: [Int64] = []
                        try await eventually(timeout: .seconds(30)) {
                            guard let ids = try? await WebhookFixture.insertEvents(db, 40, jobs: jobs) else { return false }
                            more = ids
                            return true
                        }
                        let all = (first + more).sorted()
                        for (relay, receiver) in [(pooled, pooledReceiver), (direct, directReceiver)] {
                            try await eventually(timeout: .seconds(90), relay.log) { receiver.acceptedIDs.count >= all.count }
                            #expect(receiver.acceptedIDs == all, "once each, in order, no gap: \(relay.log.suffix(1500))")
                            relay.signal(SIGTERM)
                            #expect(await relay.waitForExit(timeout: .seconds(20)) == 0, "\(relay.log.suffix(1500))")
                        }
                        #expect(!pooled.log.contains("unsupported startup parameter"))
                        // Its statements waited for the server (well within their deadline); its LISTEN broke.
                        #expect(direct.log.contains("LISTEN failed"), "the restart was not seen: \(direct.log.suffix(2000))")
                    }
                }
            }
        }

        /// An https receiver whose certificate the system does not trust: refused (the TLS failure is logged and
        /// nothing is sent) until --ca-file names its CA.
        @Test func verifiesTLSAndTrustsTheCAOfCaFile() async throws {
            try await TestDatabase.with { db in
                let jobs = try await WebhookFixture.prepare(db)
                try await db.exec("INSERT INTO push.webhook_cursors (name) VALUES ('tls')")
                let ids = try await WebhookFixture.insertEvents(db, 5, jobs: jobs)
                let directory = try makeTemporaryDirectory(prefix: "pgpush-webhook-tls-")
                defer { try? FileManager.default.removeItem(atPath: directory) }
                let certificates = SimulatorCertificates(directory: directory)
                try certificates.ensureExist(force: true)
                try await WebhookReceiver.with(tls: certificates) { receiver, url in
                    #expect(url.hasPrefix("https://localhost:"))
                    let untrusting = try RelayProcess(db: db.urlString, receiver: url, name: "tls", tag: "untrusting")
                    try await eventually(timeout: .seconds(30), untrusting.log) { untrusting.log.contains("webhook delivery failed") }
                    #expect(untrusting.log.contains("TLS refused: the receiver's certificate is not trusted"), "\(untrusting.log.suffix(1500))")
                    untrusting.signal(SIGTERM)
                    #expect(await untrusting.waitForExit(timeout: .seconds(20)) == 0)
                    #expect(receiver.requests.isEmpty)
                    #expect(try await db.scalar("SELECT last_event_id FROM push.webhook_cursors WHERE name = 'tls'") == 0)

                    let trusting = try RelayProcess(
                        db: db.urlString, receiver: url, name: "tls", extra: ["--ca-file", certificates.caCertificatePath], tag: "trusting")
                    try await eventually(timeout: .seconds(30), trusting.log) { receiver.acceptedIDs.count >= ids.count }
                    #expect(receiver.acceptedIDs == ids.sorted())
                    #expect(receiver.requests.allSatisfy { $0.signatureValid })
                    trusting.signal(SIGTERM)
                    #expect(await trusting.waitForExit(timeout: .seconds(20)) == 0)
                }
            }
        }

        /// A missing or empty secret variable, an unknown event and a URL that is not http(s) are refused at
        /// start with exit code 64 and a message that names the problem (and never a secret).
        @Test func refusesAMissingSecretAndBadFlagsAtStart() async throws {
            let base = [
                "webhook", "--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=disable",
                "--url", "http://127.0.0.1:9/hook", "--name", "x",
            ]
            let missing = try RelayProcess.runToEnd(base + ["--secret-env", "PGPUSH_TEST_NO_SUCH_SECRET"], environment: [:])
            #expect(missing.status == 64)
            #expect(missing.output.contains("PGPUSH_TEST_NO_SUCH_SECRET") && missing.output.contains("not set"), "\(missing.output)")
            let empty = try RelayProcess.runToEnd(base + ["--secret-env", "HOOK_SECRET"], environment: ["HOOK_SECRET": ""])
            #expect(empty.status == 64)
            #expect(empty.output.contains("HOOK_SECRET") && empty.output.contains("empty"), "\(empty.output)")
            let events = try RelayProcess.runToEnd(
                base + ["--secret-env", "HOOK_SECRET", "--events", "job_done,job_exploded"], environment: ["HOOK_SECRET": "topsecret"])
            #expect(events.status == 64)
            #expect(events.output.contains("job_exploded"), "\(events.output)")
            #expect(!events.output.contains("topsecret"))
            let url = try RelayProcess.runToEnd(
                ["webhook", "--database-url", "postgres://nobody@127.0.0.1:1/none", "--url", "ftp://example.com/x", "--name", "x",
                 "--secret-env", "HOOK_SECRET"], environment: ["HOOK_SECRET": "topsecret"])
            #expect(url.status == 64)
            let noName = try RelayProcess.runToEnd(
                ["webhook", "--url", "http://127.0.0.1:9/hook", "--secret-env", "HOOK_SECRET"], environment: ["HOOK_SECRET": "topsecret"])
            #expect(noName.status == 64, "--name is required")
        }

        static func firstOccurrences(_ ids: [Int64]) -> [Int64] {
            var seen = Set<Int64>()
            return ids.filter { seen.insert($0).inserted }
        }

        static func ids(_ db: TestDatabase, _ query: PostgresQuery) async throws -> [Int64] {
            var ids: [Int64] = []
            for try await id in try await db.rows(query).decode(Int64.self) { ids.append(id) }
            return ids
        }
    }
}

/// Polls `condition` until it holds; records an issue with the end of `log` if it never does.
private func eventually(
    timeout: Duration, _ log: @autoclosure () -> String = "", sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    Issue.record("not within \(timeout): \(log().suffix(2000))", sourceLocation: sourceLocation)
}

// MARK: - Fixture: the events schema, events, the relay process

enum WebhookFixture {
    static let secret = "pgpush-webhook-test-secret-7f3a"
    static let secretVariable = "PGPUSH_TEST_WEBHOOK_SECRET"

    /// Apps a, b and c with a queued job each, in a database migrated through 0025 (push.job_events,
    /// push.webhook_cursors, the pgpush_webhook role). Returns the jobs.
    static func prepare(_ db: TestDatabase) async throws -> [Int64] {
        let present = try await db.scalar("""
            SELECT count(*) FROM (VALUES (to_regclass('push.job_events')), (to_regclass('push.webhook_cursors'))) t(r)
             WHERE r IS NOT NULL
            """)
        try #require(present == 2, "push.job_events and push.webhook_cursors come with migration 0025")
        var jobs: [Int64] = []
        for app in ["a", "b", "c"] {
            try await db.createApp(app, topic: "com.example.\(app)")
            jobs.append(try await db.scalar("""
                SELECT push.enqueue(\(app), '{"aps":{"alert":"hi"}}', tokens => ARRAY[\(TestTokens.token(jobs.count))])
                """))
        }
        return jobs
    }

    /// Inserts `count` events in one statement, cycling through `names` and `apps`; returns their ids in order.
    @discardableResult
    static func insertEvents(
        _ db: TestDatabase, _ count: Int, names: [String] = WebhookConfiguration.eventNames, apps: [String] = ["a", "b"],
        jobs: [Int64]
    ) async throws -> [Int64] {
        // Straight into the table (as superuser: the schema's triggers write them otherwise), with the NOTIFY its
        // commit trigger sends.
        let rows = try await db.rows("""
            WITH written AS (
            INSERT INTO push.job_events (app_id, job_id, at, event, body)
            SELECT app, CASE WHEN name IN ('app_paused', 'app_resumed') THEN NULL ELSE (\(jobs)::int8[])[1 + g % \(jobs.count)] END,
                   clock_timestamp(), name, jsonb_build_object('n', g, 'note', 'é "quoted" \\ back', 'nested', jsonb_build_object('ok', true))
              FROM generate_series(1, \(count)) g,
                   LATERAL (SELECT (\(apps)::text[])[1 + g % \(apps.count)] AS app,
                                   (\(names)::text[])[1 + (g / \(apps.count)) % \(names.count)] AS name) pick
             ORDER BY g
            RETURNING id),
            woken AS (SELECT pg_notify('pgpush_job_events', '') AS done)
            SELECT id FROM written, woken
            """)
        var ids: [Int64] = []
        for try await id in rows.decode(Int64.self) { ids.append(id) }
        return ids.sorted()
    }
}

/// A `pgpush webhook` child process with the test secret in its environment.
final class RelayProcess: @unchecked Sendable {
    let process = Process()
    let logPath: String

    convenience init(db: String, receiver: String, name: String, extra: [String] = [], tag: String = "relay") throws {
        try self.init(
            arguments: ["webhook", "--database-url", db, "--url", receiver, "--secret-env", WebhookFixture.secretVariable,
                        "--name", name] + extra,
            environment: [WebhookFixture.secretVariable: WebhookFixture.secret], tag: tag)
    }

    init(arguments: [String], environment: [String: String], tag: String) throws {
        logPath = NSTemporaryDirectory() + "pgpush-webhook-\(tag)-\(UUID().uuidString.prefix(8)).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.executableURL = URL(fileURLWithPath: Fleet.executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment
            .filter { $0.key != "DATABASE_URL" && !$0.key.hasPrefix("PGPUSH_TEST_WEBHOOK") }
            .merging(environment, uniquingKeysWith: { _, new in new })
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: logPath)
    }

    func signal(_ signal: Int32) {
        if process.isRunning { kill(process.processIdentifier, signal) }
    }

    /// Waits for exit within `timeout`; kills and returns nil if it does not exit.
    func waitForExit(timeout: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(50))
        }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        return process.terminationStatus
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Runs `pgpush arguments…` to its end (killed after 30 s): exit status and everything it printed.
    static func runToEnd(_ arguments: [String], environment: [String: String]) throws -> (status: Int32, output: String) {
        let relay = try RelayProcess(arguments: arguments, environment: environment, tag: "once")
        let deadline = Date().addingTimeInterval(30)
        while relay.process.isRunning && Date() < deadline { usleep(50_000) }
        if relay.process.isRunning { relay.process.terminate() }
        relay.process.waitUntilExit()
        return (relay.process.terminationStatus, relay.log)
    }
}

// MARK: - The receiver

/// An HTTP(S) receiver on loopback that checks every request's signature the way the README tells receivers
/// to, records it, and answers 500 for its first `failFor` (counted from the first request), 200 after.
final class WebhookReceiver: Sendable {
    struct Request: Sendable {
        var eventID: Int64
        var headerEventID: Int64?
        var contentType: String?
        var signatureValid: Bool
        var status: Int
        var body: [UInt8]

        var json: [String: Any]? { try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] }
    }

    private struct State {
        var requests: [Request] = []
        var firstRequest: ContinuousClock.Instant?
    }

    private let state = Mutex(State())
    let secret: [UInt8]
    let failFor: Duration
    let delay: Duration

    init(secret: [UInt8], failFor: Duration, delay: Duration) {
        self.secret = secret
        self.failFor = failFor
        self.delay = delay
    }

    var requests: [Request] { state.withLock(\.requests) }
    /// The event ids answered 2xx, in the order they came.
    var acceptedIDs: [Int64] { requests.filter { (200..<300).contains($0.status) }.map(\.eventID) }

    /// The check a receiver makes: HMAC-SHA256 of the raw body with the shared secret, compared in constant time.
    func signatureIsValid(_ body: [UInt8], header: String?) -> Bool {
        guard let header, header.hasPrefix("sha256=") else { return false }
        let hex = Array(header.utf8.dropFirst(7))
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: secret))
        let expected = Array(mac.map { String(format: "%02x", $0) }.joined().utf8)
        guard hex.count == expected.count else { return false }
        return zip(hex, expected).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    func receive(body: [UInt8], headers: HTTPFields) async -> HTTPResponse.Status {
        /// The only value of a header, by name in any case; nil when absent or repeated.
        func header(_ name: String) -> String? {
            let values = headers.filter { $0.name.canonicalName == name.lowercased() }.map(\.value)
            return values.count == 1 ? values[0] : nil
        }
        if delay > .zero { try? await Task.sleep(for: delay) }
        let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
        let eventID = (object?["id"] as? NSNumber)?.int64Value ?? -1
        let now = ContinuousClock.now
        return state.withLock { state in
            let first = state.firstRequest ?? now
            state.firstRequest = first
            let status = first.duration(to: now) < failFor ? 500 : 200
            state.requests.append(Request(
                eventID: eventID, headerEventID: header("X-PGPush-Event-Id").flatMap { Int64($0) },
                contentType: header("Content-Type"), signatureValid: signatureIsValid(body, header: header("X-PGPush-Signature")),
                status: status, body: body))
            return HTTPResponse.Status(code: status)
        }
    }

    /// Runs a receiver for the length of `body`, which gets its URL (`http://127.0.0.1:<port>/hook`, or
    /// `https://localhost:<port>/hook` with `tls`).
    static func with<T: Sendable>(
        failFor: Duration = .zero, delay: Duration = .zero, tls: SimulatorCertificates? = nil,
        _ body: @Sendable (WebhookReceiver, String) async throws -> T
    ) async throws -> T {
        let receiver = WebhookReceiver(secret: Array(WebhookFixture.secret.utf8), failFor: failFor, delay: delay)
        let router = Router()
        router.post("hook") { request, _ -> Response in
            let buffer = try await request.body.collect(upTo: 1 << 20)
            let status = await receiver.receive(body: Array(buffer.readableBytesView), headers: request.headers)
            return Response(status: status)
        }
        var logger = Logger(label: "pgpush.test.webhook-receiver")
        // Its cancellation at the end says "Waiting on child channel: CancellationError()" at error level.
        logger.logLevel = .critical
        let port = BoundPort()
        let address = ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0))
        if let tls {
            let configuration = TLSConfiguration.makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(tls.serverCertificatePath).map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: tls.serverKeyPath, format: .pem)))
            let app = Application(
                router: router, server: try .tls(.http1(), tlsConfiguration: configuration), configuration: address,
                onServerRunning: { port.set($0.localAddress?.port) }, logger: logger)
            return try await serve(app, port: port) { try await body(receiver, "https://localhost:\($0)/hook") }
        }
        let app = Application(
            router: router, server: .http1(), configuration: address, onServerRunning: { port.set($0.localAddress?.port) }, logger: logger)
        return try await serve(app, port: port) { try await body(receiver, "http://127.0.0.1:\($0)/hook") }
    }

    private static func serve<T: Sendable>(
        _ app: some ApplicationProtocol, port: BoundPort, _ body: (Int) async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: Void.self, returning: T.self) { group in
            group.addTask { try await app.run() }
            defer { group.cancelAll() }
            let deadline = ContinuousClock.now + .seconds(10)
            while port.value == nil, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            return try await body(try #require(port.value))
        }
    }
}

/// The port a server bound, once it runs.
final class BoundPort: Sendable {
    private let port = Mutex<Int?>(nil)
    var value: Int? { port.withLock { $0 } }
    func set(_ value: Int?) { port.withLock { $0 = value } }
}
