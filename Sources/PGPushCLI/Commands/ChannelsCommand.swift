import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushStore
import PostgresNIO

struct ChannelsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channels",
        abstract: "List, create and delete Live Activity broadcast channels (iOS 18).",
        discussion: """
            A channel reaches every device subscribed to it with one request to APNs. push.channels holds \
            one row per channel: a worker makes it on APNs' channel management API and fills in channel_id, \
            which the app's devices subscribe to. These commands call push.create_channel and \
            push.delete_channel, as a producer would.

            Examples:
              pgpush channels create news match-2026-final --storage-policy 0 --wait
              pgpush channels list news
              pgpush channels delete news match-2026-final

            Exit codes: 0 ok, 1 database error or refused input, 2 unknown channel, 64 bad usage, 124 --wait timed out.
            """,
        subcommands: [ChannelsListCommand.self, ChannelsCreateCommand.self, ChannelsDeleteCommand.self])
}

struct ChannelsListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List channels with their state and APNs id.",
        discussion: """
            --json prints one array of objects: app_id, name, state, storage_policy, channel_id, \
            failure_reason, created_at, active_at, deleted_at.

            Exit codes: 0 ok, 1 database error, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "Only this app's channels.")
    var app: String?

    @Flag(help: "Include deleted and failed channels.")
    var all = false

    @Flag(help: "Print JSON.")
    var json = false

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.channels")
        let url = try database.resolve()
        try await reportingFailures {
            let channels = try await withOperatorStore(url, logger: logger) { store in
                try await store.listChannels(appID: app, includeEnded: all)
            }
            if json {
                try printJSON(channels.map { channel -> [String: Any] in
                    [
                        "app_id": channel.appID, "name": channel.name, "state": channel.state,
                        "storage_policy": channel.storagePolicy, "channel_id": jsonValue(channel.channelID),
                        "failure_reason": jsonValue(channel.failureReason),
                        "created_at": jsonValue(Timestamp.string(channel.createdAt)),
                        "active_at": jsonValue(Timestamp.string(channel.activeAt)),
                        "deleted_at": jsonValue(Timestamp.string(channel.deletedAt)),
                    ]
                })
                return
            }
            guard !channels.isEmpty else {
                print("no channels: make one with `pgpush channels create APP NAME`")
                return
            }
            var table = Table(["APP", "NAME", "STATE", "POLICY", "CHANNEL ID", "CREATED", "NOTE"])
            for channel in channels {
                table.append([
                    channel.appID, channel.name, channel.state, String(channel.storagePolicy), channel.channelID,
                    Timestamp.string(channel.createdAt), channel.failureReason,
                ])
            }
            print(table.render())
        }
    }
}

struct ChannelsCreateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Ask for a new channel; a worker makes it on APNs.",
        discussion: """
            Storage policy 0 stores no message (a higher publishing budget: frequent updates such as a match); \
            1 stores the latest message for up to 8 hours (rare updates such as a flight). Creating a live \
            channel again with the same policy returns it. With --wait, waits until a worker has made it and \
            prints its APNs id.

            Exit codes: 0 ok, 1 refused or failed on APNs, 64 bad usage, 124 --wait timed out.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The app id.")
    var app: String
    @Argument(help: "The channel's name: your key for it.")
    var name: String

    @Option(help: "0 (no message stored) or 1 (the latest message stored up to 8 hours).")
    var storagePolicy: Int = 0

    @Flag(help: "Wait until a worker has made the channel on APNs.")
    var wait = false

    @Option(help: "Seconds --wait waits.")
    var timeout: Double = 30

    func validate() throws {
        guard storagePolicy == 0 || storagePolicy == 1 else { throw ValidationError("--storage-policy must be 0 or 1") }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.channels")
        let url = try database.resolve()
        try await reportingFailures {
            try await withOperatorStore(url, logger: logger) { store in
                let id = try await store.createChannel(appID: app, name: name, storagePolicy: storagePolicy)
                guard wait else {
                    print("pgpush: channel \(name) of \(app) asked for (push.channels id \(id)); a worker makes it on APNs")
                    return
                }
                let deadline = ContinuousClock.now + .seconds(timeout)
                while ContinuousClock.now < deadline {
                    if let row = try await store.channelState(id: id) {
                        switch row.state {
                        case "active":
                            print(row.channelID ?? "")
                            return
                        case "failed", "deleting", "deleted":
                            throw OperatorError(.failed, "channel \(name) is \(row.state): \(row.failureReason ?? "no reason given")")
                        default:
                            break
                        }
                    }
                    try await Task.sleep(for: .milliseconds(200))
                }
                throw OperatorError(.timedOut, "channel \(name) was not made within \(timeout) s: is a worker running?")
            }
        }
    }
}

struct ChannelsDeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete a channel on APNs.",
        discussion: """
            Marks the channel for deletion; a worker deletes it on APNs and the row becomes deleted. \
            Messages APNs already stored are not cancelled.

            Exit codes: 0 ok, 1 database error, 2 unknown channel, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The app id.")
    var app: String
    @Argument(help: "The channel's name.")
    var name: String

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.channels")
        let url = try database.resolve()
        try await reportingFailures {
            do {
                _ = try await withOperatorStore(url, logger: logger) { store in
                    try await store.deleteChannel(appID: app, name: name)
                }
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "P0002" {
                throw OperatorError(.notFound, describeDatabaseError(error))
            }
            print("pgpush: channel \(name) of \(app) will be deleted on APNs")
        }
    }
}
