import ArgumentParser

/// `pgpush bench …`: bounded load generators for measuring pgpush's parts.
public struct BenchCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure pgpush components under load.",
        subcommands: [
            BenchTransportCommand.self, BenchBroadcastCommand.self, BenchSmallJobsCommand.self, BenchMixedCommand.self, BenchSoakCommand.self,
            TransportBenchSimulatorCommand.self, BenchProviderTokenCommand.self,
        ]
    )

    public init() {}
}
