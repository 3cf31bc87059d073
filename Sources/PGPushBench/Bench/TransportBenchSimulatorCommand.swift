import ArgumentParser
import Foundation
import Logging
import PGPushSimulator

/// `pgpush bench transport-simulator`: a fault-free simulator for transport benchmarks, with the ledger off so
/// its memory stays flat. Hidden: `pgpush simulator` is the general-purpose command.
struct TransportBenchSimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transport-simulator",
        abstract: "Serve a ledger-less APNs simulator for transport benchmarks.",
        shouldDisplay: false
    )

    @Option(name: .customLong("port")) var port: Int = 2197
    @Option(name: .customLong("cert-dir")) var certificateDirectory: String = "./.pgpush-simulator"
    @Option(name: .customLong("team-id")) var teamID: String
    @Option(name: .customLong("key-id")) var keyID: String
    @Option(name: .customLong("key-file")) var keyFile: String
    @Option(name: .customLong("threads")) var threads: Int = ProcessInfo.processInfo.activeProcessorCount
    @Option(name: .customLong("duration"), help: "Stop after this many seconds.") var duration: Int = 600
    /// Load generators such as h2load open many streams before the server's first SETTINGS arrive; APNs' one
    /// stream before authentication would make them fail, so a baseline run raises it.
    @Option(name: .customLong("streams-before-auth")) var streamsBeforeAuth: Int = 1
    @OptionGroup var simulatorLatency: SimulatorLatencyOptions

    func run() async throws {
        var logger = Logger(label: "pgpush.bench.simulator")
        logger.logLevel = .warning
        var configuration = APNsSimulatorConfiguration()
        configuration.port = port
        configuration.certificateDirectory = certificateDirectory
        configuration.ledgerEnabled = false
        configuration.threadCount = threads
        configuration.streamsBeforeAuth = streamsBeforeAuth
        let latency = try simulatorLatency.latency
        configuration.faults.latency = latency
        configuration.tokenKeys = [
            try SimulatorTokenKey(teamID: teamID, keyID: keyID, pem: try String(contentsOfFile: keyFile, encoding: .utf8))
        ]
        let simulator = APNsSimulator(configuration: configuration, logger: logger)
        let boundPort = try await simulator.start()
        print("listening on 127.0.0.1:\(boundPort) ca=\(simulator.caCertificatePath) latency=\(latency.label)")
        try? await Task.sleep(for: .seconds(duration))
        await simulator.shutdown()
        print(simulator.summary)
    }
}
