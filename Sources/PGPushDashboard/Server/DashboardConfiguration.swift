import Foundation

/// How `pgpush dashboard` serves. Every property has a default; ``validate()`` enforces the security rules.
public struct DashboardConfiguration: Sendable {
    /// Address to listen on. Anything but loopback requires ``password``.
    public var host: String = "127.0.0.1"
    /// Port; 0 picks a free one (tests).
    public var port: Int = 8089
    /// Prefix of every route behind a reverse proxy, such as `/pgpush` (no trailing slash; empty for none).
    public var basePath: String = ""
    /// Serves the POST actions (cancel a job, pause and resume an app). Requires ``password``.
    public var allowActions: Bool = false
    /// HTTP Basic user name (`PGPUSH_DASHBOARD_USER`); recorded in `push.operator_audit` with each action.
    public var user: String = "admin"
    /// HTTP Basic password (`PGPUSH_DASHBOARD_PASSWORD`). When set, every request needs it; never logged.
    public var password: String?
    /// `statement_timeout` of each page's transaction: a page's queries never run longer than this.
    public var statementTimeout: Duration = .seconds(5)
    /// How long one snapshot of the aggregates (the overview, and outcomes and pruned counts per filter) is shared
    /// between clients.
    public var overviewCacheTTL: Duration = .seconds(2)
    /// Seconds between the live pages' refreshes (the embedded script polls; it can be paused).
    public var refreshSeconds: Int = 5
    /// The safety valve's minimum of answers, as the workers' `--bad-device-token-min-answers` (default 1000).
    public var valveMinimumAnswers: Int64 = 1000
    /// The valve's BadDeviceToken share that trips it, as the workers' `--bad-device-token-share`.
    public var valveShare: Double = 0.2
    /// Rows per page of the jobs and audit tables.
    public var pageSize: Int = 50
    /// PostgreSQL connections of the dashboard's pool.
    public var databaseConnections: Int = 4

    public init() {}

    /// Whether ``host`` is a loopback address, where a read-only dashboard may run without a password.
    public var bindsLoopbackOnly: Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    /// The rules of the issue: actions need the password, and so does any address beyond loopback.
    public func validate() throws(DashboardError) {
        let hasPassword = !(password ?? "").isEmpty
        if allowActions, !hasPassword {
            throw DashboardError(.configuration, "--allow-actions needs PGPUSH_DASHBOARD_PASSWORD (HTTP Basic; user PGPUSH_DASHBOARD_USER, default admin)")
        }
        if !bindsLoopbackOnly, !hasPassword {
            throw DashboardError(.configuration, "--bind \(host) is beyond loopback: set PGPUSH_DASHBOARD_PASSWORD, or bind 127.0.0.1")
        }
        if !basePath.isEmpty, !basePath.hasPrefix("/") || basePath.hasSuffix("/") {
            throw DashboardError(.configuration, "--base-path must start with / and not end with one, e.g. /pgpush")
        }
        if basePath.contains(where: { "?#\"'<> ".contains($0) }) {
            throw DashboardError(.configuration, "--base-path may hold only path characters")
        }
        if !(0...65535).contains(port) {
            throw DashboardError(.configuration, "--port must be 0…65535")
        }
        if user.isEmpty || user.contains(":") {
            throw DashboardError(.configuration, "PGPUSH_DASHBOARD_USER must be non-empty and hold no colon")
        }
    }
}

/// A failure of the dashboard; its description never contains the password or a database URL.
public struct DashboardError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable {
        let name: String
        /// A flag or environment variable is wrong or missing.
        public static let configuration = Code(name: "configuration")
        /// The listening socket could not be opened.
        public static let bind = Code(name: "bind")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
