import ArgumentParser

@main
struct PGPushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pgpush",
        abstract: "Bulk push dispatcher: PostgreSQL queue, APNs over HTTP/2.",
        subcommands: [
            MigrateCommand.self,
            WorkerCommand.self,
            PruneCommand.self,
            BenchCommand.self,
            EnqueueCommand.self,
            WatchCommand.self,
            StatsCommand.self,
            AppsCommand.self,
            DevicesCommand.self,
            SimulatorCommand.self,
            DemoCommand.self,
        ]
    )
}
