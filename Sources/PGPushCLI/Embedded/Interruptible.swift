import Dispatch
import Foundation

/// Runs `body` in a child task that SIGINT or SIGTERM cancels, then always runs `cleanup` in the caller's
/// (uncancelled) task, so Ctrl-C still stops workers and removes the throwaway cluster.
///
/// Returns the body's result or rethrows its error after cleanup; an interrupted run throws ``Interrupted``.
func runInterruptibly<Result: Sendable>(
    _ body: @escaping @Sendable () async throws -> Result,
    cleanup: () async -> Void
) async throws -> Result {
    let work = Task { try await body() }
    let signals = [SIGINT, SIGTERM].map { number -> DispatchSourceSignal in
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler {
            FileHandle.standardError.write(Data("\npgpush: interrupted; cleaning up\n".utf8))
            work.cancel()
        }
        source.resume()
        return source
    }
    let result = await work.result
    await cleanup()
    for source in signals { source.cancel() }
    if work.isCancelled, case .failure = result { throw Interrupted() }
    return try result.get()
}

/// The run was stopped by SIGINT or SIGTERM.
struct Interrupted: Error, CustomStringConvertible {
    var description: String { "interrupted" }
}
