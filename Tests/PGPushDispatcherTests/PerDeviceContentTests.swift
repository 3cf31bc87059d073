import Foundation
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

extension EndToEndTests {
    /// Locale variants and badge counters, end to end: what each device's provider received, read from the
    /// simulators' ledgers.
    @Suite(.timeLimit(.minutes(6)))
    struct PerDeviceContentTests {
        /// The APNs payloads the simulator accepted, by token, as JSON objects.
        static func apnsPayloads(_ fleet: Fleet) throws -> [String: [[String: Any]]] {
            var payloads: [String: [[String: Any]]] = [:]
            for entry in fleet.simulator.ledger.entries {
                let text = try #require(entry.payload, "the simulator keeps payloads (ledgerKeepsPayloads)")
                let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
                payloads[entry.token, default: []].append(object)
            }
            return payloads
        }

        static func alertBody(_ payload: [String: Any]) -> String? {
            ((payload["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String
        }

        static func badge(_ payload: [String: Any]) -> Int? {
            (payload["aps"] as? [String: Any])?["badge"] as? Int
        }

        static func token(_ index: Int) -> String { String(repeating: "0", count: 56) + String(format: "%08x", index) }

        @Test func eachDeviceGetsTheVariantOfItsLocaleOnItsOwnPlatform() async throws {
            try await Fleet.with(configure: { $0.ledgerKeepsPayloads = true }) { fleet in
                try await AndroidSide.with(fleet, configure: { $0.ledgerKeepsMessages = true }) { android in
                    try await android.createDualApp(fleet)
                    // iOS: fr, fr-CA (given as fr_CA), de, en-US (no variant), none; Android: fr-CA, none.
                    let iosLocales: [String?] = ["fr", "fr_CA", "de", "en-US", nil]
                    for (index, locale) in iosLocales.enumerated() {
                        for copy in 0..<20 {
                            try await fleet.db.exec("""
                                SELECT push.register_device('app', \(Self.token(index * 100 + copy)), locale => \(locale))
                                """)
                        }
                    }
                    for copy in 0..<20 {
                        try await fleet.db.exec("""
                            SELECT push.register_device('app', \("fcm-frca-\(copy):APA91b0123456789"), platform => 'android', locale => 'fr-CA')
                            """)
                        try await fleet.db.exec("""
                            SELECT push.register_device('app', \("fcm-none-\(copy):APA91b0123456789"), platform => 'android')
                            """)
                    }
                    let job = try await fleet.db.scalar("""
                        SELECT push.enqueue('app', '{"aps":{"alert":{"title":"News","body":"Hello"},"sound":"default"}}',
                            localized => '{"fr": {"aps": {"alert": {"body": "Bonjour"}}},
                                           "fr-CA": {"aps": {"alert": {"body": "Allo"}}},
                                           "de": {"aps": {"alert": {"body": "Hallo"}}, "fcm": {"notification": {"title": "Neues"}}}}')
                        """)
                    let worker = try fleet.startWorker(android.workerArguments)
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                    await worker.stop()

                    let payloads = try Self.apnsPayloads(fleet)
                    #expect(payloads.count == 100)
                    let expected = ["Bonjour", "Allo", "Hallo", "Hello", "Hello"]
                    for (index, body) in expected.enumerated() {
                        for copy in 0..<20 {
                            let sent = try #require(payloads[Self.token(index * 100 + copy)])
                            #expect(sent.count == 1)
                            #expect(Self.alertBody(sent[0]) == body, "device \(index * 100 + copy)")
                            // Merged key by key: the variant's alert keeps the job's title and sound.
                            #expect((sent[0]["aps"] as? [String: Any])?["sound"] as? String == "default")
                            #expect(((sent[0]["aps"] as? [String: Any])?["alert"] as? [String: Any])?["title"] as? String == "News")
                            #expect(Self.badge(sent[0]) == nil)
                        }
                    }
                    // Android: the variant's message is derived from its payload, so fr-CA devices read "Allo".
                    let messages = android.simulator.ledger.entries
                    #expect(messages.count == 40)
                    for entry in messages {
                        let message = try #require(entry.messageObject)
                        let body = (message["notification"] as? [String: Any])?["body"] as? String
                        #expect(body == (entry.token.hasPrefix("fcm-frca") ? "Allo" : "Hello"), "\(entry.token)")
                        // Firebase's own reports name the job.
                        #expect((message["fcm_options"] as? [String: Any])?["analytics_label"] as? String == "pgpush-job-\(job)")
                    }
                    #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 140)
                }
            }
        }

        /// Every device's badge numbers, in the order its provider received them.
        static func badges(_ fleet: Fleet) throws -> [String: [Int]] {
            try apnsPayloads(fleet).mapValues { $0.map { badge($0) ?? -1 } }
        }

        @Test func incrementJobsCountUpPerDeviceAndSetBadgeResetsTheCounter() async throws {
            try await Fleet.with(configure: { $0.ledgerKeepsPayloads = true }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(50)
                // One device starts from a counter of its own.
                try await fleet.db.exec("SELECT push.set_badge('app', token => \(Self.token(7)), value => 10)")
                let worker = try fleet.startWorker()
                for _ in 1...3 {
                    let job = try await fleet.enqueue(", badge => 'increment'")
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(60)) == "done", "\(worker.log.suffix(2000))")
                }
                var badges = try Self.badges(fleet)
                #expect(badges.count == 50)
                for (token, sent) in badges {
                    #expect(sent == (token == Self.token(7) ? [11, 12, 13] : [1, 2, 3]), "\(token): \(sent)")
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE badge = 3") == 49)
                #expect(try await fleet.count("SELECT badge FROM push.devices WHERE token = \(Self.token(7))") == 13)

                // The app opened on one device of a user: reset, then the next job sends 1.
                #expect(try await fleet.count("SELECT push.set_badge('app', token => \(Self.token(1)), value => 0)") == 1)
                fleet.simulator.ledger.reset()
                let job = try await fleet.enqueue(", badge => 'increment', tokens => ARRAY['\(Self.token(1))', '\(Self.token(2))']")
                #expect(try await fleet.waitForJob(job, timeout: .seconds(60)) == "done")
                badges = try Self.badges(fleet)
                #expect(badges == [Self.token(1): [1], Self.token(2): [4]])
                await worker.stop()
            }
        }

        @Test func retriedAndResentTokensMoveTheCounterOncePerJob() async throws {
            try await Fleet.with(configure: {
                $0.ledgerKeepsPayloads = true
                $0.faults.serverErrorRate = 0.05
            }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(1000)
                let leaseArguments = ["--lease", "3", "--heartbeat-interval", "1", "--retry-base-delay", "0.2", "--retry-max-delay", "1"]
                // Two jobs through retries of 5 % 500 and 503 answers.
                var worker = try fleet.startWorker(leaseArguments, id: "first")
                for _ in 1...2 {
                    let job = try await fleet.enqueue(", badge => 'increment'")
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                    #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 1000)
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE attempt > 1") > 0)
                // A third job with its worker killed mid-way: the rescuer re-sends the killed worker's chunks.
                let job = try await fleet.enqueue(", badge => 'increment'")
                let deadline = ContinuousClock.now + .seconds(60)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") < 200, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                worker.signal(SIGKILL)
                _ = await worker.waitForExit(timeout: .seconds(5))
                worker = try fleet.startWorker(leaseArguments, id: "rescuer")
                #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                await worker.stop()

                #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE badge = 3") == 1000)
                // Whatever was sent twice was sent with the same number: one step per job and device.
                for (token, sent) in try Self.badges(fleet) {
                    #expect(Set(sent) == [1, 2, 3], "\(token): \(sent)")
                }
            }
        }
    }
}
