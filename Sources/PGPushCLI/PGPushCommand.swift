import ArgumentParser
import Foundation
import NIOCore
import NIOPosix
import PGPushBench

@main
struct PGPushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pgpush",
        abstract: "Bulk push dispatcher: PostgreSQL queue, APNs over HTTP/2.",
        // The operator commands are in Commands/; `bench` and `demo` (and their rigs) are PGPushBench's.
        subcommands: [
            MigrateCommand.self,
            WorkerCommand.self,
            PruneCommand.self,
            BenchCommand.self,
            EnqueueCommand.self,
            WatchCommand.self,
            StatsCommand.self,
            JobsCommand.self,
            AppsCommand.self,
            DevicesCommand.self,
            ChannelsCommand.self,
            SimulatorCommand.self,
            DemoCommand.self,
            DashboardCommand.self,
            WebhookCommand.self,
        ]
    )

    static func main() async {
        if EventLoopExecutor.shouldTakeOver(arguments: CommandLine.arguments, environment: ProcessInfo.processInfo.environment) {
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
        await Self.main(nil)
    }
}

/// Whether Swift concurrency runs on NIO's event-loop threads instead of its own pool.
///
/// For the commands whose hot path is one `await` per notification (the worker and the transport benchmark),
/// running tasks on the event loops removes two thread hops per request and lets a whole read's worth of
/// resumed senders write their next requests in one batch. The commands that manage child processes block a
/// thread while they wait, which must never be an event loop, so they keep Swift's pool.
/// `PGPUSH_NIO_EXECUTOR=0` keeps Swift's pool everywhere.
enum EventLoopExecutor {
    static func shouldTakeOver(arguments: [String], environment: [String: String]) -> Bool {
        if environment["PGPUSH_NIO_EXECUTOR"] == "0" { return false }
        let words = arguments.dropFirst().prefix(2)
        return words.first == "worker" || Array(words) == ["bench", "transport"]
    }
}
