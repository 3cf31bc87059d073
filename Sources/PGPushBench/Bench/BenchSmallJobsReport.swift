import Foundation
import PGPushCLISupport
import PGPushSimulator

/// What `pgpush bench small-jobs` measured.
struct BenchSmallJobsReport: Sendable {
    var jobs: Int
    var producers: Int
    var priority: Int
    var workers: Int
    /// The in-process simulator's answer delay; `nil` with an external simulator.
    var simulatorLatency: SimulatorLatency?
    /// Wall-clock time the producers took to commit all jobs.
    var enqueueSeconds: Double
    /// `max(finished_at) − min(created_at)` over the jobs.
    var spanSeconds: Double?
    /// Jobs that finished after the last producer committed, and the seconds from that commit to the last
    /// finish: the queue draining with nothing more coming in.
    var drainedJobs: Int = 0
    var drainSeconds: Double?
    /// Enqueue→first send of each job that sent, in seconds.
    var latencySeconds: [Double]
    /// How many jobs ended in each state.
    var states: [String: Int]
    /// Rows of `push.deliveries` for the jobs, and how many distinct jobs they name.
    var outcomeRows: Int
    var outcomeJobs: Int
    /// The workers, as they reported when stopped (startup, warm-up and measured phase).
    var workerReports: [WorkerProcess.Report]
    /// The workers' CPU time from just before the producers started to just before SIGTERM.
    var workerCPUSeconds: Double?
    /// Notifications the in-process simulator accepted during the measured phase.
    var simulatorAccepted: Int?

    var jobsPerSecond: Double? {
        guard let spanSeconds, spanSeconds > 0 else { return nil }
        return Double(jobs) / spanSeconds
    }

    /// The drain's rate: ``drainedJobs`` ÷ ``drainSeconds``.
    var drainedJobsPerSecond: Double? {
        guard let drainSeconds, drainSeconds > 0, drainedJobs > 0 else { return nil }
        return Double(drainedJobs) / drainSeconds
    }

    var allDone: Bool { states["done", default: 0] == jobs && states.count == 1 }
    /// Exactly one outcome per job.
    var outcomesMatch: Bool { outcomeRows == jobs && outcomeJobs == jobs }
    var passed: Bool { allDone && outcomesMatch }

    var peakRSSKilobytes: Int? { workerReports.compactMap(\.peakRSSKilobytes).max() }

    /// All workers' statements, or `nil` when one of them did not report.
    var statements: Int? {
        let counts = workerReports.compactMap(\.statements)
        return counts.count == workerReports.count && !counts.isEmpty ? counts.reduce(0, +) : nil
    }

    var statementsPerJob: Double? { statements.map { Double($0) / Double(max(jobs, 1)) } }
    var cpuMicrosecondsPerJob: Double? { workerCPUSeconds.map { $0 * 1e6 / Double(max(jobs, 1)) } }

    func latencyMilliseconds(_ fraction: Double) -> Double? {
        BenchBroadcastReport.percentile(latencySeconds, fraction).map { $0 * 1000 }
    }

    var latencyMaxMilliseconds: Double? { latencySeconds.max().map { $0 * 1000 } }
    /// The quickest job: at least the simulator's answer delay, since first_sent_at is the time of the answer.
    var latencyMinMilliseconds: Double? { latencySeconds.min().map { $0 * 1000 } }

    var json: [String: Any] {
        [
            "jobs": jobs, "producers": producers, "priority": priority, "workers": workers,
            "simulator_latency_ms": jsonValue(simulatorLatency?.json),
            "enqueue_seconds": enqueueSeconds,
            "span_seconds": jsonValue(spanSeconds),
            "jobs_per_second": jsonValue(jobsPerSecond),
            "drained_jobs": drainedJobs,
            "drain_seconds": jsonValue(drainSeconds),
            "drained_jobs_per_second": jsonValue(drainedJobsPerSecond),
            "enqueue_to_first_send_min_ms": jsonValue(latencyMinMilliseconds),
            "enqueue_to_first_send_p50_ms": jsonValue(latencyMilliseconds(0.50)),
            "enqueue_to_first_send_p99_ms": jsonValue(latencyMilliseconds(0.99)),
            "enqueue_to_first_send_max_ms": jsonValue(latencyMaxMilliseconds),
            "job_states": states,
            "all_done": allDone,
            "outcome_rows": outcomeRows,
            "outcome_jobs": outcomeJobs,
            "one_outcome_per_job": outcomesMatch,
            "statements": jsonValue(statements),
            "statements_per_job": jsonValue(statementsPerJob),
            "worker_cpu_seconds": jsonValue(workerCPUSeconds),
            "worker_cpu_us_per_job": jsonValue(cpuMicrosecondsPerJob),
            "worker_peak_rss_kb": jsonValue(peakRSSKilobytes),
            "simulator_accepted": jsonValue(simulatorAccepted),
            "worker_reports": workerReports.map(\.json),
        ]
    }

    var text: String {
        func number(_ value: Double?, _ format: String) -> String { value.map { String(format: format, $0) } ?? "-" }
        var table = Table(["figure", "value"])
        table.append(["jobs", String(jobs)])
        table.append(["producers (one transaction each)", String(producers)])
        table.append(["priority", String(priority)])
        table.append(["workers", String(workers)])
        table.append(["simulator latency", simulatorLatency?.label ?? "external simulator"])
        table.append(["enqueue, all producers (s)", String(format: "%.2f", enqueueSeconds)])
        table.append(["first enqueue → last finish (s)", number(spanSeconds, "%.2f")])
        table.append(["jobs/s", number(jobsPerSecond, "%.1f")])
        table.append(["jobs left at the last commit", String(drainedJobs)])
        table.append(["last commit → last finish (s)", number(drainSeconds, "%.2f")])
        table.append(["jobs/s draining (after the last commit)", number(drainedJobsPerSecond, "%.1f")])
        table.append(["enqueue→first send min (ms)", number(latencyMinMilliseconds, "%.1f")])
        table.append(["enqueue→first send p50 (ms)", number(latencyMilliseconds(0.50), "%.1f")])
        table.append(["enqueue→first send p99 (ms)", number(latencyMilliseconds(0.99), "%.1f")])
        table.append(["enqueue→first send max (ms)", number(latencyMaxMilliseconds, "%.1f")])
        table.append(["job states", BroadcastRig.describe(states)])
        table.append(["outcomes (rows / jobs)", "\(outcomeRows) / \(outcomeJobs)" + (outcomesMatch ? "" : "  MISMATCH")])
        table.append(["worker statements per job (total ÷ jobs)", number(statementsPerJob, "%.2f")])
        table.append(["worker CPU per job (µs)", number(cpuMicrosecondsPerJob, "%.0f")])
        table.append(["worker peak RSS (MB)", number(peakRSSKilobytes.map { Double($0) / 1024 }, "%.1f")])
        table.append(["simulator accepted", simulatorAccepted.map { String($0) }])
        return table.render()
    }
}
