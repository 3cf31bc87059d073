import Foundation
import PGPushCLISupport
import PGPushDevelopment
import PGPushSimulator

/// What `pgpush bench soak` measured: one sample per interval, the faults it injected, the audit of every
/// job's outcomes, and the done-when checks.
struct BenchSoakReport: Sendable {
    /// One worker process at one sample.
    struct WorkerSample: Sendable {
        var id: String
        var pid: Int32
        /// `VmRSS` of `/proc/<pid>/status`, in kB.
        var rssKilobytes: Int?
        /// Entries of `/proc/<pid>/fd`.
        var openFileDescriptors: Int?

        var json: [String: Any] {
            ["id": id, "pid": pid, "rss_kb": jsonValue(rssKilobytes), "open_fds": jsonValue(openFileDescriptors)]
        }
    }

    /// One line of the run: what happened since the previous sample, and the state now.
    struct Sample: Sendable {
        /// Seconds since the traffic started, and since the previous sample.
        var atSeconds: Double
        var intervalSeconds: Double
        /// One-token jobs enqueued by the producers, and enqueue errors, in the interval.
        var enqueued: Int
        var enqueueErrors: Int
        /// One-token jobs that finished in the interval (database time since the previous successful sample),
        /// and their enqueue→first send percentiles.
        var oneTokenJobs: Int?
        var oneTokenSeconds: Double?
        var p50Milliseconds: Double?
        var p99Milliseconds: Double?
        /// Broadcast outcomes written in the interval, and over how many seconds.
        var broadcastTokens: Int64?
        var broadcastSeconds: Double?
        /// Jobs of the app still queued or running.
        var unfinishedJobs: Int?
        var workers: [WorkerSample]
        var tables: [RigStore.TableSize]?
        /// Faults that happened in the interval.
        var events: [String]
        /// Why the database part is missing (the server was restarting).
        var databaseError: String?

        var oneTokenJobsPerSecond: Double? {
            guard let oneTokenJobs, let oneTokenSeconds, oneTokenSeconds > 0 else { return nil }
            return Double(oneTokenJobs) / oneTokenSeconds
        }

        var broadcastTokensPerSecond: Double? {
            guard let broadcastTokens, let broadcastSeconds, broadcastSeconds > 0 else { return nil }
            return Double(broadcastTokens) / broadcastSeconds
        }

        /// All workers' RSS, or `nil` when one could not be read or none ran.
        var rssKilobytes: Int? {
            let values = workers.compactMap(\.rssKilobytes)
            return values.count == workers.count && !values.isEmpty ? values.reduce(0, +) : nil
        }

        var openFileDescriptors: Int? {
            let values = workers.compactMap(\.openFileDescriptors)
            return values.count == workers.count && !values.isEmpty ? values.reduce(0, +) : nil
        }

        func table(_ name: String) -> RigStore.TableSize? { tables?.first { $0.name == name } }

        var json: [String: Any] {
            [
                "at_seconds": atSeconds, "interval_seconds": intervalSeconds,
                "enqueued": enqueued, "enqueue_errors": enqueueErrors,
                "one_token_jobs": jsonValue(oneTokenJobs),
                "one_token_jobs_per_second": jsonValue(oneTokenJobsPerSecond),
                "enqueue_to_first_send_p50_ms": jsonValue(p50Milliseconds),
                "enqueue_to_first_send_p99_ms": jsonValue(p99Milliseconds),
                "broadcast_tokens": jsonValue(broadcastTokens),
                "broadcast_tokens_per_second": jsonValue(broadcastTokensPerSecond),
                "unfinished_jobs": jsonValue(unfinishedJobs),
                "worker_rss_kb": jsonValue(rssKilobytes),
                "worker_open_fds": jsonValue(openFileDescriptors),
                "workers": workers.map(\.json),
                "tables": jsonValue(tables.map { Dictionary(uniqueKeysWithValues: $0.map { ($0.name, $0.json) }) }),
                "events": events,
                "database_error": jsonValue(databaseError),
            ]
        }

        /// The per-interval line of text mode.
        var line: String {
            func number(_ value: Double?, _ format: String) -> String { value.map { String(format: format, $0) } ?? "-" }
            func megabytes(_ bytes: Int64) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) }
            var parts = [
                String(format: "soak %6.0fs", atSeconds),
                "jobs/s \(number(oneTokenJobsPerSecond, "%.1f"))",
                "broadcast tokens/s \(number(broadcastTokensPerSecond, "%.0f"))",
                "p50/p99 \(number(p50Milliseconds, "%.1f"))/\(number(p99Milliseconds, "%.1f")) ms",
                "rss \(number(rssKilobytes.map { Double($0) / 1024 }, "%.1f")) MB",
                "fds \(openFileDescriptors.map(String.init) ?? "-")",
                "unfinished \(unfinishedJobs.map(String.init) ?? "-")",
            ]
            if let tables {
                parts.append("MB table+index " + tables.map { "\($0.name) \(megabytes($0.tableBytes))+\(megabytes($0.indexBytes))" }
                    .joined(separator: " "))
                parts.append("dead " + tables.map { "\($0.name) \($0.deadTuples)" }.joined(separator: " "))
            }
            if enqueueErrors > 0 { parts.append("enqueue errors \(enqueueErrors)") }
            if let databaseError { parts.append("database: \(databaseError.prefix(80))") }
            if !events.isEmpty { parts.append("[" + events.joined(separator: "; ") + "]") }
            return parts.joined(separator: "  ")
        }
    }

    /// A fault the run injected.
    struct Event: Sendable {
        /// `postgres_restart` or `worker_restart`.
        var kind: String
        var atSeconds: Double
        /// How long it took: server down to up again, or SIGTERM to the old worker's exit.
        var seconds: Double
        var detail: [String: String]

        var json: [String: Any] {
            ["kind": kind, "at_seconds": atSeconds, "seconds": seconds, "detail": detail]
        }
    }

    /// One done-when check.
    struct Check: Sendable {
        var name: String
        var passed: Bool
        /// What was compared, for people.
        var summary: String
        /// The numbers compared (`nil` where not measured).
        var figures: [String: Double?]

        var json: [String: Any] {
            (["passed": passed, "summary": summary] as [String: Any]).merging(figures.mapValues { jsonValue($0) }) { $1 }
        }
    }

    var duration: Double
    var devices: Int
    var broadcastEvery: Double
    var rate: Int
    var users: Int
    var priority: Int
    var reportEvery: Double
    var workers: Int
    var simulatorLatency: SimulatorLatency
    var serverErrorRate: Double
    var goAwayEveryStreams: Int?
    var postgresRestartAt: Double?
    var workerRestartAt: Double?
    /// The check windows: the first and last `window` seconds, and the reference sample at `window`.
    var window: Double
    var samples: [Sample]
    var events: [Event]
    var broadcasts: [(id: Int64, state: String, total: Int64?, processed: Int64)]
    var producer: SoakProducer.Counters
    var drained: Bool
    var drainSeconds: Double
    var audit: RigStore.OutcomeAudit?
    var auditError: String?
    var simulator: SimulatorStatistics?
    var workerReports: [WorkerProcess.Report]
    var checks: [Check]

    var passed: Bool { !checks.isEmpty && checks.allSatisfy(\.passed) }

    var postgresRestarts: Int { events.filter { $0.kind == "postgres_restart" }.count }
    var workerRestarts: Int { events.filter { $0.kind == "worker_restart" }.count }

    var json: [String: Any] {
        [
            "duration_seconds": duration, "devices": devices, "broadcast_every_seconds": broadcastEvery,
            "rate": rate, "users": users, "priority": priority, "report_every_seconds": reportEvery, "workers": workers,
            "simulator_latency_ms": simulatorLatency.json,
            "faults": [
                "server_error_rate": serverErrorRate, "goaway_every_streams": jsonValue(goAwayEveryStreams),
                "postgres_restart_at_seconds": jsonValue(postgresRestartAt), "worker_restart_at_seconds": jsonValue(workerRestartAt),
            ] as [String: Any],
            "window_seconds": window,
            "samples": samples.map(\.json),
            "events": events.map(\.json),
            "postgres_restarts": postgresRestarts,
            "worker_restarts": workerRestarts,
            "one_token_jobs_enqueued": producer.enqueued,
            "enqueue_errors": producer.errors,
            "enqueue_max_lag_ms": producer.maximumLagSeconds * 1000,
            "broadcasts": broadcasts.map {
                ["id": $0.id, "state": $0.state, "total": jsonValue($0.total), "outcomes": $0.processed] as [String: Any]
            },
            "drained": drained,
            "drain_seconds": drainSeconds,
            "audit": jsonValue(audit.map { audit -> [String: Any] in
                [
                    "jobs": audit.jobs, "one_token_jobs": audit.oneTokenJobs, "broadcasts": audit.broadcasts,
                    "unfinished": audit.unfinished, "outcome_rows": audit.outcomeRows,
                    "duplicate_outcomes": audit.duplicateOutcomes, "missing_outcomes": audit.missingOutcomes,
                    "jobs_with_wrong_count": audit.jobsWithWrongCount,
                    "one_token_jobs_not_one_token": audit.oneTokenJobsNotOneToken,
                    "broadcasts_with_other_audience": audit.broadcastsWithOtherAudience,
                    "exactly_once": audit.exactlyOnce,
                ]
            }),
            "audit_error": jsonValue(auditError),
            "simulator": jsonValue(simulator.map { statistics -> [String: Any] in
                [
                    "requests": statistics.requestsTotal, "accepted": statistics.count(status: 200),
                    "server_errors": statistics.count(status: 500) + statistics.count(status: 503),
                    "goaways_sent": statistics.goAwaysSent, "connections_accepted": statistics.connectionsAccepted,
                ]
            }),
            "worker_reports": workerReports.map(\.json),
            "checks": Dictionary(uniqueKeysWithValues: checks.map { ($0.name, $0.json) }),
            "passed": passed,
        ]
    }

    var text: String {
        func number(_ value: Double?, _ format: String) -> String { value.map { String(format: format, $0) } ?? "-" }
        var table = Table(["figure", "value"])
        table.append(["duration (s)", number(duration, "%.0f")])
        table.append(["broadcasts (devices, every s)", "\(broadcasts.count) (\(devices), \(number(broadcastEvery, "%.0f")))"])
        table.append(["one-token jobs enqueued (rate /s)", "\(producer.enqueued) (\(rate))"])
        table.append(["enqueue errors, max producer lag (ms)", "\(producer.errors), \(number(producer.maximumLagSeconds * 1000, "%.0f"))"])
        table.append(["simulator latency", simulatorLatency.label])
        table.append(["5xx rate, GOAWAY every", "\(number(serverErrorRate * 100, "%.1f")) %, \(goAwayEveryStreams.map { "\($0) streams" } ?? "never")"])
        if let simulator {
            table.append(["simulator 5xx / GOAWAYs / connections",
                          "\(simulator.count(status: 500) + simulator.count(status: 503)) / \(simulator.goAwaysSent) / \(simulator.connectionsAccepted)"])
        }
        for event in events {
            table.append([event.kind.replacingOccurrences(of: "_", with: " "),
                          String(format: "at %.0f s, %.1f s", event.atSeconds, event.seconds)])
        }
        table.append(["samples", String(samples.count)])
        table.append(["drained", drained ? String(format: "yes, in %.1f s", drainSeconds) : String(format: "no, after %.1f s", drainSeconds)])
        if let audit {
            table.append(["jobs audited (one-token / broadcasts)", "\(audit.jobs) (\(audit.oneTokenJobs) / \(audit.broadcasts))"])
            table.append(["outcome rows, duplicates, missing", "\(audit.outcomeRows), \(audit.duplicateOutcomes), \(audit.missingOutcomes)"])
        } else {
            table.append(["audit", auditError ?? "not run"])
        }
        var checksTable = Table(["check", "result", "what"])
        for check in checks {
            checksTable.append([check.name, check.passed ? "pass" : "FAIL", check.summary])
        }
        return table.render() + "\n\n" + checksTable.render() + "\n\n" + (passed ? "all checks passed" : "some checks FAILED")
    }
}

extension RigStore.TableSize {
    var totalBytes: Int64 { tableBytes + indexBytes }

    var json: [String: Any] {
        ["table_bytes": tableBytes, "index_bytes": indexBytes, "dead_tuples": deadTuples, "live_tuples": liveTuples]
    }
}
