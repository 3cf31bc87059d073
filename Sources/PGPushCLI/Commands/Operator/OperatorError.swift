import ArgumentParser
import Foundation
import PGPushCore
import PostgresNIO

/// A failure of an operator command: printed as one `pgpush: …` line on standard error, then the process
/// exits with the code's exit status (never ArgumentParser's generic "Error: …" dump).
struct OperatorError: Error, CustomStringConvertible {
    /// What went wrong, and the exit status it maps to.
    struct Code: Equatable, Sendable {
        let name: String
        let exitStatus: Int32

        /// A database error, an unreadable file, bad input data: exit 1.
        static let failed = Code(name: "failed", exitStatus: 1)
        /// The app or job named on the command line does not exist: exit 2.
        static let notFound = Code(name: "not_found", exitStatus: 2)
        /// A watched job ended as cancelled: exit 3, so a script can tell it from a delivery.
        static let jobCancelled = Code(name: "job_cancelled", exitStatus: 3)
        /// `--timeout` ran out before the watched job ended: exit 124, as timeout(1) does.
        static let timedOut = Code(name: "timed_out", exitStatus: 124)
    }

    let code: Code
    let message: String

    init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    var description: String { message }
}

/// Runs a command body, turning any failure into one readable line and an exit status.
///
/// Usage errors (`ValidationError`, exit 64) and explicit `ExitCode`s pass through unchanged.
func reportingFailures(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as ValidationError {
        throw error
    } catch let error as ExitCode {
        throw error
    } catch let error as OperatorError {
        printError("pgpush: \(error.message)")
        throw ExitCode(error.code.exitStatus)
    } catch let error as PostgresTransactionError where error.closureError is OperatorError {
        // Thrown inside a transaction: the transaction wrapper must not hide the exit status.
        let inner = error.closureError as! OperatorError
        printError("pgpush: \(inner.message)")
        throw ExitCode(inner.code.exitStatus)
    } catch {
        printError("pgpush: \(describeDatabaseError(error))")
        throw ExitCode.failure
    }
}

/// The PostgreSQL server's own message for a query error (what a producer would see), or a short
/// description of a connection failure. Never includes the password.
func describeDatabaseError(_ error: any Error) -> String {
    if let error = error as? PostgresTransactionError {
        if let inner = error.closureError { return describeDatabaseError(inner) }
        if let inner = error.beginError ?? error.commitError { return describeDatabaseError(inner) }
    }
    if let error = error as? PSQLError {
        if let message = error.serverInfo?[.message] {
            if let detail = error.serverInfo?[.detail] { return "\(message) (\(detail))" }
            return message
        }
        if let underlying = error.underlying {
            return "database connection failed: \(underlying)"
        }
        return "database connection failed: \(error.code)"
    }
    if let error = error as? OperatorError { return error.message }
    return "\(error)"
}

/// Writes one line to standard error.
func printError(_ line: String) {
    FileHandle.standardError.write(Data((LogRedaction.redact(line) + "\n").utf8))
}

/// Flushes standard output, so progress reaches a pipe as it happens (`fflush(NULL)` flushes every stream
/// without touching the global `stdout`, which strict concurrency rejects).
func flushStandardOutput() {
    fflush(nil)
}
