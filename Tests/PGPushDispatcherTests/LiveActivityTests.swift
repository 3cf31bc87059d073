import Foundation
import PGPushDispatcher
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// Live Activities end to end: one worker (in this process) with token auth, the simulator's device endpoint,
/// its broadcast endpoint and its channel management API over TLS, and PostgreSQL. Each test waits on
/// conditions, never on fixed sleeps.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(3)))
    struct LiveActivityTests {
        static let bundleID = "com.example.app"
        static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"eta":5}}}"#
        static let start = #"{"aps":{"timestamp":1700000000,"event":"start","alert":{"title":"Order placed"},"attributes-type":"DeliveryAttributes","attributes":{"order":"42"}}}"#

        /// The worker's channel management API is the simulator's second port; reconciling runs every second.
        static func channels(_ fleet: Fleet, reconcileEvery: Duration = .seconds(1)) -> @Sendable (inout WorkerConfiguration) -> Void {
            let port = fleet.simulator.channelsPort ?? 0
            return { configuration in
                configuration.apnsChannelsEndpointOverride = "https://localhost:\(port)"
                configuration.channelReconcileInterval = reconcileEvery
            }
        }

        /// Waits for a channel row to reach `state`; returns its APNs id.
        static func waitForChannel(_ fleet: Fleet, _ name: String, state: String, timeout: Duration = .seconds(20)) async throws -> String? {
            _ = try await fleet.waitUntil("SELECT count(*) FROM push.channels WHERE name = \(name) AND state = \(state)", timeout: timeout) { $0 == 1 }
            for try await id in try await fleet.db.rows("SELECT channel_id FROM push.channels WHERE name = \(name) AND state = \(state)").decode(String?.self) {
                return id
            }
            return nil
        }

        static func text(_ fleet: Fleet, _ query: PostgresQuery) async throws -> String? {
            for try await value in try await fleet.db.rows(query).decode(String?.self) { return value }
            return nil
        }

        @Test func broadcastsUpdatesAndStartsEachReachExactlyTheirKindOfToken() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                // 1,000 devices, 300 update tokens (activities act-1…act-300) and 200 push-to-start tokens
                // (users s-1…s-200), each kind under its own token prefix.
                try await fleet.registerDevices(1000)
                try await fleet.db.exec("""
                    SELECT push.register_device('app', 'a1' || lpad(to_hex(g), 62, '0'), token_kind => 'activity', activity_id => 'act-' || g)
                      FROM generate_series(1, 300) g
                    """)
                try await fleet.db.exec("""
                    SELECT push.register_device('app', 'b2' || lpad(to_hex(g), 62, '0'), user_id => 's-' || g,
                                                token_kind => 'activity_start', activity_type => 'DeliveryAttributes')
                      FROM generate_series(1, 200) g
                    """)
                try await fleet.withWorker { _ in
                    let alert = try await fleet.enqueue()
                    #expect(try await fleet.waitForJob(alert, timeout: .seconds(60)) == "done")
                    let sent = fleet.simulator.ledger.entries
                    #expect(sent.count == 1000)
                    #expect(sent.allSatisfy { !$0.token.hasPrefix("a1") && !$0.token.hasPrefix("b2") }, "an alert reached an activity token")
                    fleet.simulator.ledger.reset()

                    // An update token rotates: act-1's new token replaces the old one before the update goes out.
                    let rotated = "a1" + String(repeating: "f", count: 62)
                    try await fleet.db.exec("SELECT push.register_device('app', \(rotated), token_kind => 'activity', activity_id => 'act-1')")
                    let update = try await fleet.count("""
                        SELECT push.enqueue('app', \(Self.update)::jsonb, push_type => 'liveactivity', apns_priority => 5,
                                            activity_ids => ARRAY(SELECT 'act-' || g FROM generate_series(1, 100) g))
                        """)
                    #expect(try await fleet.waitForJob(update, timeout: .seconds(60)) == "done")
                    let updates = fleet.simulator.ledger.entries
                    let expected = Set((2...100).map { "a1" + String(repeating: "0", count: 62 - String($0, radix: 16).count) + String($0, radix: 16) } + [rotated])
                    #expect(Set(updates.map(\.token)) == expected)
                    #expect(updates.count == 100)
                    #expect(updates.allSatisfy { $0.topic == Self.bundleID + ".push-type.liveactivity" && $0.pushType == "liveactivity" && $0.priority == 5 })
                    fleet.simulator.ledger.reset()

                    // A start to 50 users reaches their push-to-start tokens of that type only.
                    let starts = try await fleet.count("""
                        SELECT push.enqueue('app', \(Self.start)::jsonb, push_type => 'liveactivity', activity_type => 'DeliveryAttributes',
                                            user_ids => ARRAY(SELECT 's-' || g FROM generate_series(1, 50) g))
                        """)
                    #expect(try await fleet.waitForJob(starts, timeout: .seconds(60)) == "done")
                    let started = fleet.simulator.ledger.entries
                    #expect(started.count == 50)
                    #expect(started.allSatisfy { $0.token.hasPrefix("b2") && $0.pushType == "liveactivity" })
                    #expect(try await fleet.count("SELECT delivered FROM push.job_progress WHERE job_id = \(starts)") == 50)
                }
            }
        }

        @Test func aChannelIsMadeBroadcastToWithOneRequestAndDeleted() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(50)
                try await fleet.withWorker(configure: Self.channels(fleet)) { _ in
                    try await fleet.db.exec("SELECT push.create_channel('app', 'match-1', storage_policy => 0)")
                    let made = ContinuousClock.now
                    let id = try #require(try await Self.waitForChannel(fleet, "match-1", state: "active", timeout: .seconds(10)))
                    #expect(ContinuousClock.now - made < .seconds(5), "made within seconds")
                    #expect(fleet.simulator.channels.ids(bundleID: Self.bundleID) == [id])
                    #expect(fleet.simulator.channels.storagePolicy(of: id) == 0)

                    let job = try await fleet.count("""
                        SELECT push.enqueue('app', \(Self.update)::jsonb, channel => 'match-1', apns_priority => 10)
                        """)
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(30)) == "done")
                    let broadcasts = fleet.simulator.broadcastLedger
                    #expect(broadcasts.count == 1, "one request, whatever the number of subscribers")
                    #expect(broadcasts.first?.channelID == id && broadcasts.first?.expiration == 0 && broadcasts.first?.priority == 10)
                    #expect(fleet.simulator.ledger.acceptedCount == 0, "no device got it one by one")
                    #expect(try await fleet.count("SELECT total FROM push.job_progress WHERE job_id = \(job)") == 1)
                    #expect(try await fleet.count("SELECT delivered FROM push.job_progress WHERE job_id = \(job)") == 1)
                    #expect(try await fleet.count("SELECT count FROM push.delivery_stats WHERE app_id = 'app' AND status = 200") == 1)

                    try await fleet.db.exec("SELECT push.delete_channel('app', 'match-1')")
                    _ = try await Self.waitForChannel(fleet, "match-1", state: "deleted")
                    #expect(fleet.simulator.channels.ids(bundleID: Self.bundleID).isEmpty, "deleted on APNs")
                    await #expect(throws: PSQLError.self) {
                        try await fleet.db.exec("SELECT push.enqueue('app', \(Self.update)::jsonb, channel => 'match-1')")
                    }
                }
            }
        }

        @Test func aChannelGoneOnAPNsFailsItsBroadcastAndIsReconciledWhenDeletedElsewhere() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.withWorker(configure: Self.channels(fleet)) { _ in
                    try await fleet.db.exec("SELECT push.create_channel('app', 'gone', storage_policy => 1)")
                    try await fleet.db.exec("SELECT push.create_channel('app', 'elsewhere', storage_policy => 1)")
                    let gone = try #require(try await Self.waitForChannel(fleet, "gone", state: "active"))
                    let elsewhere = try #require(try await Self.waitForChannel(fleet, "elsewhere", state: "active"))

                    // Deleted behind pgpush's back, then sent to before reconciling noticed: ChannelNotRegistered
                    // fails the job with that reason and marks the channel deleted.
                    try await fleet.db.exec("UPDATE push.channels SET active_at = now() + interval '1 hour' WHERE name = 'gone'")
                    fleet.simulator.channels.delete(gone)
                    let job = try await fleet.count("SELECT push.enqueue('app', \(Self.update)::jsonb, channel => 'gone')")
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(30)) == "failed")
                    _ = try await fleet.waitUntil("""
                        SELECT count(*) FROM push.jobs WHERE id = \(job) AND failure_reason = 'ChannelNotRegistered'
                        """) { $0 == 1 }
                    _ = try await Self.waitForChannel(fleet, "gone", state: "deleted")

                    // Deleted elsewhere with nothing sent: the comparison with all-channels finds it.
                    fleet.simulator.channels.delete(elsewhere)
                    _ = try await Self.waitForChannel(fleet, "elsewhere", state: "deleted")
                    let reason = try await Self.text(fleet, "SELECT failure_reason FROM push.channels WHERE name = 'elsewhere'")
                    #expect(reason?.contains("all-channels") == true, "\(reason ?? "nil")")
                }
            }
        }

        @Test func theChannelLimitFailsTheCreateAndThrottledRequestsAreRetriedWithBackoff() async throws {
            try await Fleet.with(configure: { $0.channelLimit = 1 }) { fleet in
                try await fleet.createApp()
                // No reconciling here: its listings would take the injected faults meant for the delete.
                try await fleet.withWorker(configure: Self.channels(fleet, reconcileEvery: .seconds(600))) { _ in
                    try await fleet.db.exec("SELECT push.create_channel('app', 'first')")
                    _ = try await Self.waitForChannel(fleet, "first", state: "active")
                    try await fleet.db.exec("SELECT push.create_channel('app', 'second')")
                    _ = try await Self.waitForChannel(fleet, "second", state: "failed")
                    let reason = try await Self.text(fleet, "SELECT failure_reason FROM push.channels WHERE name = 'second'")
                    #expect(reason?.contains("CannotCreateChannelConfig") == true && reason?.contains("10,000") == true, "\(reason ?? "nil")")

                    // 429, then 503, then 503: the delete is tried again after a backoff each time, and succeeds.
                    let before = fleet.simulator.channels.requests.count
                    fleet.simulator.updateFaults {
                        $0.channelManagement.failFirst = 1
                        $0.channelManagement.status = 429
                    }
                    try await fleet.db.exec("SELECT push.delete_channel('app', 'first')")
                    _ = try await fleet.waitUntil("SELECT attempts FROM push.channels WHERE name = 'first'") { $0 >= 1 }
                    fleet.simulator.updateFaults {
                        $0.channelManagement.failFirst = 2
                        $0.channelManagement.status = 503
                    }
                    _ = try await Self.waitForChannel(fleet, "first", state: "deleted", timeout: .seconds(30))
                    let requests = fleet.simulator.channels.requests.dropFirst(before).filter { $0.method == "DELETE" }
                    #expect(requests.map(\.status).prefix(1) == [429])
                    #expect(requests.filter { $0.status == 503 }.count == 2)
                    #expect(requests.last?.status == 204)
                    for (earlier, later) in zip(requests, requests.dropFirst()) {
                        #expect(later.receivedAt.timeIntervalSince(earlier.receivedAt) >= 0.15, "no backoff between \(earlier.status) and \(later.status)")
                    }
                    #expect(fleet.simulator.channels.ids(bundleID: Self.bundleID).isEmpty)
                }
            }
        }

        @Test func updateTokensNotRegisteredAgainExpireWithAnAuditRow() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.db.exec("""
                    SELECT push.register_device('app', 'a1' || lpad(to_hex(g), 62, '0'), token_kind => 'activity', activity_id => 'act-' || g)
                      FROM generate_series(1, 3) g
                    """)
                try await fleet.db.exec("UPDATE push.devices SET registered_at = now() - interval '13 hours' WHERE activity_id <> 'act-3'")
                try await fleet.withWorker { _ in
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.pruned_devices WHERE reason = 'ActivityTokenExpired'") { $0 == 2 }
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE activity_id = 'act-3'") == 1)
            }
        }
    }
}
