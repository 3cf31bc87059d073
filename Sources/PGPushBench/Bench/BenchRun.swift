import ArgumentParser
import Foundation
import Logging
import PGPushCLISupport
import PGPushSimulator

/// A report an end-to-end bench mode prints: a table, or JSON with `--json`.
protocol BenchReport: Sendable {
    var json: [String: Any] { get }
    var text: String { get }
}

extension BenchBroadcastReport: BenchReport {}
extension BenchSmallJobsReport: BenchReport {}
extension BenchMixedReport: BenchReport {}
extension BenchSoakReport: BenchReport {}

/// What the end-to-end bench modes share: the rig built from their common flags, and one run with cleanup on
/// every exit path, exit code 130 when interrupted, and the report printed.
enum BenchRun {
    /// A rig configuration from the flags every mode has; the mode adds what is its own.
    static func rigConfiguration(
        mode: String, databaseURL: String?, chunkSize: Int?, connectionsPerApp: Int?, simulatorLatency: SimulatorLatency,
        databaseRoundTrip: Duration? = nil
    ) -> BroadcastRig.Configuration {
        var logger = Logger(label: "pgpush.bench.\(mode)")
        logger.logLevel = .warning
        var configuration = BroadcastRig.Configuration(databaseURL: databaseURL, appPrefix: "bench", logger: logger)
        configuration.maintenanceIntervalSeconds = nil
        if let chunkSize { configuration.workerArguments += ["--chunk-size", String(chunkSize)] }
        if let connectionsPerApp { configuration.workerArguments += ["--connections-per-app", String(connectionsPerApp)] }
        configuration.simulatorLatency = simulatorLatency
        configuration.databaseRoundTrip = databaseRoundTrip
        return configuration
    }

    /// Runs `measure` on a rig made from `configuration`, removes the rig whatever happens, and prints the
    /// report. A failed run is reported on standard error as `pgpush bench <mode>: …` and exits 1.
    static func run<Report: BenchReport>(
        mode: String, configuration: BroadcastRig.Configuration, json: Bool,
        _ measure: @escaping @Sendable (BroadcastRig) async throws -> Report
    ) async throws -> Report {
        let report = try await Self.measure(mode: mode, configuration: configuration, measure)
        if json {
            try printJSON(report.json)
        } else {
            print(report.text)
        }
        return report
    }

    /// Runs `measure` on a rig made from `configuration` and removes the rig whatever happens, printing nothing
    /// but a failure (`pgpush bench <mode>: …` on standard error, exit 1); exit code 130 when interrupted.
    static func measure<Report: BenchReport>(
        mode: String, configuration: BroadcastRig.Configuration,
        _ measure: @escaping @Sendable (BroadcastRig) async throws -> Report
    ) async throws -> Report {
        let rig = try BroadcastRig(configuration: configuration)
        do {
            return try await runInterruptibly({ try await measure(rig) }, cleanup: { await rig.cleanup() })
        } catch is Interrupted {
            throw ExitCode(130)
        } catch {
            FileHandle.standardError.write(Data("pgpush bench \(mode): \(error)\n".utf8))
            throw ExitCode.failure
        }
    }
}
