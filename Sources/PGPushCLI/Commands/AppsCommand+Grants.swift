import ArgumentParser
import Foundation
import Logging
import PGPushStore
import PostgresNIO

/// `pgpush apps grant` and `pgpush apps revoke`: which apps a producer or reader login may use.
struct AppsGrantCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "grant",
        abstract: "Let a login (or every member of a group role) use an app.",
        discussion: """
            A login with at least one grant can enqueue, register devices, cancel jobs and read \
            push.job_progress, push.delivery_stats, push.job_latency and push.queue_backlog for its granted apps \
            only; other apps' rows are invisible to it. A login without grants keeps its role's access to every \
            app. Same as SELECT push.grant_app(role_name, app_id). Recorded in push.operator_audit.

            Examples:
              pgpush apps grant billing_service shop

            Exit codes: 0 granted (or already granted), 1 database error, 2 unknown app or role, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The login or group role.")
    var role: String

    @Argument(help: "The app id.")
    var app: String

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            try await AppGrants.checkExists(role: role, app: app, url: url, logger: logger)
            let added = try await withOperatorStore(url, logger: logger) { store in
                try await store.grantApp(role: role, appID: app)
            }
            print("pgpush: \(role) may use \(app)" + (added ? " (granted, audited)" : " (already granted)"))
        }
    }
}

struct AppsRevokeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Take an app back from a login or group role.",
        discussion: """
            Same as SELECT push.revoke_app(role_name, app_id). When a login's last grant is revoked it has no \
            grants, so its role's access to every app applies again. Recorded in push.operator_audit.

            Examples:
              pgpush apps revoke billing_service shop

            Exit codes: 0 revoked (or not granted), 1 database error, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The login or group role.")
    var role: String

    @Argument(help: "The app id.")
    var app: String

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            let removed = try await withOperatorStore(url, logger: logger) { store in
                try await store.revokeApp(role: role, appID: app)
            }
            print("pgpush: \(role) " + (removed ? "may no longer use \(app) (revoked, audited)" : "had no grant for \(app)"))
            if removed {
                let left = try await withOperatorStore(url, logger: logger) { store in try await store.grantCount(role: role) }
                if left == 0 {
                    print("pgpush: \(role) has no grants left: its role's access to every app applies again")
                }
            }
        }
    }
}

enum AppGrants {
    /// Turns an unknown role or app into the CLI's "not found" exit code, with a message naming which.
    static func checkExists(role: String, app: String, url: DatabaseURL, logger: Logger) async throws {
        let (roleExists, appExists) = try await withOperatorStore(url, logger: logger) { store in
            try await store.roleAndAppExist(role: role, appID: app)
        }
        guard roleExists else { throw OperatorError(.notFound, "unknown role \(role): create the login first (CREATE ROLE \(role) LOGIN IN ROLE pgpush_producer)") }
        guard appExists else { throw OperatorError(.notFound, "unknown app \(app)") }
    }
}
