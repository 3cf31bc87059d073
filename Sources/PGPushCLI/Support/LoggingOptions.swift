import ArgumentParser
import Foundation
import Logging

/// `--log-level` and `--log-format`, falling back to `PGPUSH_LOG_LEVEL` and `PGPUSH_LOG_FORMAT`.
struct LoggingOptions: ParsableArguments {
    enum Format: String, ExpressibleByArgument, CaseIterable {
        case text
        case json
    }

    @Option(help: "trace, debug, info, notice, warning, error or critical (env: PGPUSH_LOG_LEVEL; default info).")
    var logLevel: Logger.Level?

    @Option(help: "text or json (env: PGPUSH_LOG_FORMAT; default text).")
    var logFormat: Format?

    var resolvedLevel: Logger.Level {
        logLevel ?? ProcessInfo.processInfo.environment["PGPUSH_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
    }

    var resolvedFormat: Format {
        logFormat ?? ProcessInfo.processInfo.environment["PGPUSH_LOG_FORMAT"].flatMap(Format.init(rawValue:)) ?? .text
    }

    /// Bootstraps swift-log once for this process and returns the root logger.
    func bootstrap(label: String) -> Logger {
        let level = resolvedLevel
        let format = resolvedFormat
        LoggingBootstrap.once {
            LoggingSystem.bootstrap { label in
                var handler = RedactingLogHandler(
                    wrapped: format == .json ? JSONLogHandler(label: label) : StreamLogHandler.standardError(label: label))
                handler.logLevel = level
                return handler
            }
        }
        var logger = Logger(label: label)
        logger.logLevel = level
        return logger
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

enum LoggingBootstrap {
    private static let done = NSLock()
    nonisolated(unsafe) private static var bootstrapped = false

    static func once(_ body: () -> Void) {
        done.lock()
        defer { done.unlock() }
        guard !bootstrapped else { return }
        bootstrapped = true
        body()
    }
}
