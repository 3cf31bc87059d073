import Metrics
import PGPushCore
import Synchronization

/// The worker's Prometheus metrics, through swift-metrics. Names are a public contract: the Grafana dashboard
/// and alert rules in deploy/ use them.
public final class WorkerMetrics: Sendable {
    private let sendCounters = Mutex<[String: Counter]>([:])
    private let prunedCounters = Mutex<[String: Counter]>([:])
    private let channelCounters = Mutex<[String: Counter]>([:])
    private let webPushCounters = Mutex<[String: Counter]>([:])
    private let valveGauges = Mutex<[String: (tripped: Gauge, share: Gauge)]>([:])
    let sendDuration = Metrics.Timer(label: "pgpush_send_duration_seconds")
    let claimDuration = Metrics.Timer(label: "pgpush_claim_duration_seconds")
    let retries = Counter(label: "pgpush_retries_total")
    let inflightStreams = Gauge(label: "pgpush_inflight_streams")
    let connections = Gauge(label: "pgpush_connections")
    let goaways = Counter(label: "pgpush_goaways_total")
    let reconnects = Counter(label: "pgpush_reconnects_total")
    let backlogTokens = Gauge(label: "pgpush_queue_backlog_tokens")
    let oldestJobAge = Gauge(label: "pgpush_oldest_job_age_seconds")
    let pausedApps = Gauge(label: "pgpush_paused_apps")
    let valveTrips = Counter(label: "pgpush_bad_device_token_valve_trips_total")
    let providerTokenStorms = Counter(label: "pgpush_provider_token_update_storms_total")
    /// One group-commit write of many chunks' results.
    let completionDuration = Metrics.Timer(label: "pgpush_completion_duration_seconds")
    /// Chunks whose lease this worker lost before it could record them (another worker records them).
    let leasesLost = Counter(label: "pgpush_leases_lost_total")
    /// Chunk results waiting to be written (grows while PostgreSQL is unreachable).
    let unwrittenResults = Gauge(label: "pgpush_unwritten_results")
    /// Jobs this worker failed after APNs refused their requests with a job-level error.
    let jobsFailedByJobError = Counter(label: "pgpush_jobs_failed_total", dimensions: [("reason", "job_error")])
    /// Notifications this worker holds: in flight, waiting for their turn, or claimed ahead.
    let heldNotifications = Gauge(label: "pgpush_held_notifications")
    private let lastPoolCounters = Mutex<(goaways: Int, reconnects: Int)>((0, 0))

    public init() {}

    /// A send's result: HTTP status (0 without a response) and reason.
    struct SendKey: Hashable {
        var status: Int
        var reason: String?
    }

    /// Sends' results by app, status and reason. Counted per chunk and added here once: per request, building
    /// the counter's key cost more than the counting.
    func recordSends(app: String, provider: PushProvider, _ counts: [SendKey: Int]) {
        for (send, count) in counts {
            let key = "\(app)|\(provider)|\(send.status)|\(send.reason ?? "")"
            let counter = sendCounters.withLock { counters in
                if let counter = counters[key] { return counter }
                let counter = Counter(
                    label: "pgpush_sends_total",
                    dimensions: [("app", app), ("provider", provider.rawValue), ("status", String(send.status)), ("reason", send.reason ?? "")])
                counters[key] = counter
                return counter
            }
            counter.increment(by: count)
        }
    }

    /// The wrong-environment valve per app: 1 while tripped, and the BadDeviceToken share of its window.
    func recordValve(app: String, tripped: Bool, answered: Int64, badDeviceTokens: Int64) {
        let gauges = valveGauges.withLock { gauges in
            if let existing = gauges[app] { return existing }
            let made = (Gauge(label: "pgpush_valve_tripped", dimensions: [("app", app)]),
                        Gauge(label: "pgpush_bad_device_token_share", dimensions: [("app", app)]))
            gauges[app] = made
            return made
        }
        gauges.tripped.record(tripped ? 1 : 0)
        gauges.share.record(answered > 0 ? Double(badDeviceTokens) / Double(answered) : 0)
    }

    /// Live Activity channel management requests by app, operation (create, delete, list), status and what
    /// they meant (done, gone, refused, retry).
    func recordChannelRequest(app: String, operation: String, status: Int, verdict: ChannelManagementVerdict) {
        let meaning = switch verdict {
        case .done: "done"
        case .gone: "gone"
        case .refused: "refused"
        case .retry: "retry"
        }
        let key = "\(app)|\(operation)|\(status)|\(meaning)"
        let counter = channelCounters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(
                label: "pgpush_channel_requests_total",
                dimensions: [("app", app), ("operation", operation), ("status", String(status)), ("result", meaning)])
            counters[key] = counter
            return counter
        }
        counter.increment()
    }

    /// Web Push answers by push-service origin (`https://host[:port]`, never an endpoint's path) and status.
    func recordWebPush(origin: Substring, status: Int) {
        let key = "\(origin)|\(status)"
        let counter = webPushCounters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(
                label: "pgpush_webpush_requests_total", dimensions: [("origin", String(origin)), ("status", String(status))])
            counters[key] = counter
            return counter
        }
        counter.increment()
    }

    /// The origin of a Web Push endpoint as metrics label it: its scheme and authority.
    static func webPushOrigin(of endpoint: String) -> Substring {
        let afterScheme = endpoint.range(of: "://").map(\.upperBound) ?? endpoint.startIndex
        return endpoint[..<(endpoint[afterScheme...].firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? endpoint.endIndex)]
    }

    func recordPruned(reason: String, count: Int) {
        let counter = prunedCounters.withLock { counters in
            if let counter = counters[reason] { return counter }
            let counter = Counter(label: "pgpush_pruned_total", dimensions: [("reason", reason)])
            counters[reason] = counter
            return counter
        }
        counter.increment(by: count)
    }

    /// Pool counters are cumulative; the metrics take the difference since the last sample.
    func samplePools(streams: Int, connections open: Int, goaways: Int, reconnects: Int) {
        inflightStreams.record(streams)
        connections.record(open)
        let (goawayDelta, reconnectDelta) = lastPoolCounters.withLock { last in
            let deltas = (max(0, goaways - last.goaways), max(0, reconnects - last.reconnects))
            last = (goaways, reconnects)
            return deltas
        }
        if goawayDelta > 0 { self.goaways.increment(by: goawayDelta) }
        if reconnectDelta > 0 { self.reconnects.increment(by: reconnectDelta) }
    }
}
