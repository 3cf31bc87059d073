import ArgumentParser
import Foundation
import PGPushStore
import PostgresNIO

/// `pgpush apps confirm-stale`: the operator's word that an app's BadDeviceToken answers are real.
struct AppsConfirmStaleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "confirm-stale",
        abstract: "Confirm that an app's audience really is stale, so its BadDeviceToken devices are pruned.",
        discussion: """
            The wrong-environment safety valve pauses an app when too many of its recent answers are \
            BadDeviceToken, and keeps those devices: usually the app points at the wrong APNs environment. \
            When you know the tokens really are dead (an imported or years-old audience), this command confirms \
            the app's BadDeviceToken and DeviceTokenNotForTopic reports for pruning, lifts a valve pause and \
            restarts the app's window. Every use is recorded in push.operator_audit with who ran it and the note.

            If the environment was wrong instead, fix push.apps.environment and run `pgpush apps resume`: that \
            discards the kept reports and prunes nothing.

            Examples:
              pgpush apps confirm-stale news --note "2019 import, tokens known dead"

            Exit codes: 0 confirmed, 1 database error, 2 unknown app, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The app id.")
    var app: String

    @Option(help: "Why; recorded in push.operator_audit.")
    var note: String?

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            let exists = try await withOperatorStore(url, logger: logger) { store in try await store.appExists(app) }
            guard exists else { throw OperatorError(.notFound, "unknown app \(app)") }
            let confirmed = try await withOperatorStore(url, logger: logger) { store in
                try await store.confirmStaleAudience(app, note: note)
            }
            print("pgpush: \(app): \(confirmed) BadDeviceToken report(s) confirmed for pruning; the valve's window restarts (audited)")
        }
    }
}
