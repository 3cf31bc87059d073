import ArgumentParser
import Logging
import PGPushCLISupport
import PGPushStore
import PostgresNIO

struct PruneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Delete the device tokens APNs reported dead (the workers do this on their own, too).",
        discussion: """
            Runs one pass of the pruner: 410 Unregistered/ExpiredToken devices are deleted unless they
            re-registered after APNs' timestamp; BadDeviceToken/DeviceTokenNotForTopic devices are deleted once
            their job's answers show the wrong-environment safety valve did not trip. Every deletion is audited
            in push.pruned_devices. With --dry-run, nothing changes: it lists what would be deleted and why.

            Examples:
              pgpush prune --dry-run --database-url postgres://pgpush_worker@db/push
              pgpush prune --json

            Exit codes: 0 ok, 1 database failure, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Flag(help: "Show what would be deleted and why, without deleting anything.")
    var dryRun = false

    @Option(help: "Answers a job needs before BadDeviceToken devices are pruned (the valve's minimum; default 1000).")
    var minimumAnswers: Int = 1000

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.prune")
        let url = try database.resolve()
        try await reportingFailures {
            // The pool retries a failed connection quietly; one plain connection first says what is wrong.
            try await withOperatorConnection(url, logger: logger) { _ in }
            let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 2), backgroundLogger: logger)
            let devices = try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                let store = QueueStore(client: client, workerID: "pgpush-prune", logger: logger)
                var all: [QueueStore.PrunedDevice] = []
                while true {
                    let batch = try await store.prune(minimumAnswers: minimumAnswers, dryRun: dryRun)
                    all += batch
                    if dryRun || batch.isEmpty { break }
                }
                return all
            }
            if json {
                try printJSON([
                    "dry_run": dryRun,
                    "devices": devices.map { device -> [String: Any] in
                        [
                            "app_id": device.appID, "token": device.token, "reason": device.reason, "job_id": device.jobID,
                            "apns_timestamp": device.apnsTimestamp.map { $0.timeIntervalSince1970 } as Any,
                        ]
                    },
                ])
                return
            }
            let verb = dryRun ? "would prune" : "pruned"
            print("pgpush: \(verb) \(devices.count) device(s)")
            for device in devices {
                print("  \(device.appID)  \(device.token.prefix(8))…  \(device.reason)  job \(device.jobID)")
            }
        }
    }
}
