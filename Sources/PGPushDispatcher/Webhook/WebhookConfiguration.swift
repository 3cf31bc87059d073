import Foundation
import PGPushCore
import PGPushStore

/// What `pgpush webhook` runs with.
public struct WebhookConfiguration: Sendable {
    /// The event names of `push.job_events`.
    public static let eventNames = [
        "job_started", "job_done", "job_failed", "job_cancelled", "job_replaced", "app_paused", "app_resumed",
        "devices_pruned",
    ]

    /// The receiver: an `http` or `https` URL. Redirects are not followed (a 3xx is an answer that is not 2xx).
    public var url: URL
    /// The HMAC-SHA256 key, from the environment; never logged, never stored.
    public var secret: [UInt8]
    /// The relay's name: the row of `push.webhook_cursors` that holds its cursor.
    public var name: String
    public var filter: WebhookEventFilter
    /// Extra trusted CA certificates (PEM) for an https URL; verification stays on.
    public var caFile: String?
    /// How long one POST may take, connecting included, before it counts as failed and is retried.
    public var requestTimeout: Duration = .seconds(10)
    /// How often the relay looks for new events when no NOTIFY wakes it.
    public var pollInterval: Duration = .seconds(1)
    /// Events read at once (the relay still sends them one at a time).
    public var batchSize = 100
    /// The backoff between attempts at one event: full jitter, from 1 s doubling up to 30 s, forever.
    public var retryPolicy = RetryPolicy(maxAttempts: .max, baseDelay: .seconds(1), maxDelay: .seconds(30))
    /// A failure that repeats itself (same status, same error) is logged at most this often.
    public var failureReportEvery: Duration = .seconds(30)

    public init(url: URL, secret: [UInt8], name: String, filter: WebhookEventFilter = .init(), caFile: String? = nil) {
        self.url = url
        self.secret = secret
        self.name = name
        self.filter = filter
        self.caFile = caFile
    }

    /// The URL for logs: scheme, host, port and path, never user information or a query (either may hold a
    /// credential).
    public var loggableURL: String {
        Self.loggable(url)
    }

    static func loggable(_ url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return "(url)" }
        components.user = nil
        components.password = nil
        components.query = components.query == nil ? nil : "…"
        components.fragment = nil
        return components.string ?? "(url)"
    }

    /// `--events`: comma-separated event names, each one of ``eventNames``.
    public static func parseEvents(_ raw: String) throws(PGPushError) -> [String] {
        let names = raw.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !names.isEmpty else {
            throw PGPushError(.invalidConfiguration, "--events names no event; known events: \(eventNames.joined(separator: ","))")
        }
        for name in names where !eventNames.contains(name) {
            throw PGPushError(.invalidConfiguration, "--events: unknown event '\(name)'; known events: \(eventNames.joined(separator: ","))")
        }
        var seen = Set<String>()
        return names.filter { seen.insert($0).inserted }
    }

    /// `--url`: an absolute http or https URL with a host.
    public static func parseURL(_ raw: String) throws(PGPushError) -> URL {
        guard let url = URL(string: raw), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host, !host.isEmpty
        else {
            throw PGPushError(.invalidConfiguration, "--url must be an http:// or https:// URL with a host")
        }
        return url
    }

    /// The secret from the environment variable `variable`: refused when it is unset or empty. The message
    /// names the variable, never a value.
    public static func secret(fromVariable variable: String, in environment: [String: String]) throws(PGPushError) -> [UInt8] {
        guard !variable.isEmpty else { throw PGPushError(.invalidConfiguration, "--secret-env names no variable") }
        guard let value = environment[variable] else {
            throw PGPushError(.invalidConfiguration, "the webhook secret variable \(variable) (--secret-env) is not set")
        }
        guard !value.isEmpty else {
            throw PGPushError(.invalidConfiguration, "the webhook secret variable \(variable) (--secret-env) is empty")
        }
        return Array(value.utf8)
    }
}
