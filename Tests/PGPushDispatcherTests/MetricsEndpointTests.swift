import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PGPushDevelopment
import PGPushTestSupport
import Testing

extension EndToEndTests {
    @Suite(.timeLimit(.minutes(3)))
    struct MetricsEndpointTests {
        /// One sample line of the Prometheus text exposition format.
        struct Sample: Hashable {
            var name: String
            var labels: [String: String]
            var value: Double
        }

        /// A strict parser of the text format (version 0.0.4): comments are `# HELP`/`# TYPE` lines, every other
        /// line is `name{label="value",…} number`.
        static func parse(_ text: String) throws -> [Sample] {
            var samples: [Sample] = []
            let namePattern = try Regex(#"^[a-zA-Z_:][a-zA-Z0-9_:]*$"#)
            for line in text.split(separator: "\n") {
                if line.hasPrefix("#") {
                    let parts = line.split(separator: " ", maxSplits: 3)
                    #expect(parts.count >= 3 && ["HELP", "TYPE"].contains(parts[1]), "bad comment line: \(line)")
                    if parts[1] == "TYPE" {
                        #expect(["counter", "gauge", "histogram", "summary", "untyped"].contains(String(parts.last ?? "")), "bad TYPE: \(line)")
                    }
                    continue
                }
                var rest = Substring(line)
                var labels: [String: String] = [:]
                let name: Substring
                if let brace = rest.firstIndex(of: "{") {
                    name = rest[..<brace]
                    guard let close = rest.lastIndex(of: "}") else { throw ParseError(line: String(line)) }
                    for pair in rest[rest.index(after: brace)..<close].split(separator: ",") where !pair.isEmpty {
                        let kv = pair.split(separator: "=", maxSplits: 1)
                        guard kv.count == 2, kv[1].hasPrefix("\""), kv[1].hasSuffix("\"") else { throw ParseError(line: String(line)) }
                        labels[String(kv[0])] = String(kv[1].dropFirst().dropLast())
                    }
                    rest = rest[rest.index(after: close)...]
                } else {
                    guard let space = rest.firstIndex(of: " ") else { throw ParseError(line: String(line)) }
                    name = rest[..<space]
                    rest = rest[space...]
                }
                guard (try? namePattern.wholeMatch(in: String(name))) != nil,
                      let value = Double(rest.trimmingCharacters(in: .whitespaces).split(separator: " ").first.map(String.init) ?? "")
                else { throw ParseError(line: String(line)) }
                samples.append(Sample(name: String(name), labels: labels, value: value))
            }
            return samples
        }

        struct ParseError: Error { var line: String }

        static func get(_ port: Int, _ path: String) async throws -> (Int, String) {
            let (data, response) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)\(path)")!)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
        }

        static let expectedNames = [
            "pgpush_send_duration_seconds_bucket", "pgpush_claim_duration_seconds_count", "pgpush_inflight_streams",
            "pgpush_connections", "pgpush_queue_backlog_tokens", "pgpush_paused_apps",
            "pgpush_completion_duration_seconds_count", "pgpush_leases_lost_total", "pgpush_unwritten_results",
            "pgpush_held_notifications", "pgpush_jobs_failed_total", "pgpush_valve_tripped", "pgpush_bad_device_token_share",
        ]

        @Test func metricsParseAsPrometheusTextAndCountTheSends() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(300)
                try await fleet.registerDevices(20, prefix: "dead", registeredDaysAgo: 30)
                let job = try await fleet.enqueue()
                let port = try freeLoopbackPort()
                let worker = try fleet.startWorker(["--metrics-port=\(port)", "--metrics-host", "127.0.0.1"])
                #expect(try await fleet.waitForJob(job, timeout: .seconds(90)) == "done")
                // Every gauge is recorded once a maintenance pass has run after the job.
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(20)) {
                    let body = (try? await Self.get(port, "/metrics").1) ?? ""
                    return Self.expectedNames.allSatisfy { body.contains($0) }
                }

                let (health, _) = try await Self.get(port, "/healthz")
                #expect(health == 200)
                let (ready, _) = try await Self.get(port, "/readyz")
                #expect(ready == 200)
                let (status, body) = try await Self.get(port, "/metrics")
                #expect(status == 200)
                let samples = try Self.parse(body)
                let sends = samples.filter { $0.name == "pgpush_sends_total" }
                #expect(sends.first { $0.labels["status"] == "200" && $0.labels["app"] == "app" && $0.labels["provider"] == "apns" }?.value == 300)
                #expect(sends.first { $0.labels["status"] == "410" && $0.labels["reason"] == "Unregistered" }?.value == 20)
                for name in Self.expectedNames {
                    #expect(samples.contains { $0.name == name }, "missing \(name)")
                }
                // Nothing was lost or left unwritten in a healthy run, and the valve judged the app as healthy.
                #expect(samples.first { $0.name == "pgpush_leases_lost_total" }?.value == 0)
                #expect(samples.first { $0.name == "pgpush_unwritten_results" }?.value == 0)
                #expect(samples.first { $0.name == "pgpush_completion_duration_seconds_count" }.map { $0.value > 0 } == true)
                #expect(samples.first { $0.name == "pgpush_valve_tripped" && $0.labels["app"] == "app" }?.value == 0)
                #expect(samples.first { $0.name == "pgpush_bad_device_token_share" && $0.labels["app"] == "app" } != nil)
                let (missing, _) = try await Self.get(port, "/nope")
                #expect(missing == 404)

                // A draining worker is not ready.
                worker.signal(SIGTERM)
                #expect(await worker.waitForExit(timeout: .seconds(40)) == 0)
            }
        }
    }
}
