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
    let (interrupts, interrupt) = AsyncStream.makeStream(of: Void.self)
    let signals = [SIGINT, SIGTERM].map { number -> DispatchSourceSignal in
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler {
            FileHandle.standardError.write(Data("\npgpush: interrupted; cleaning up\n".utf8))
            interrupt.yield()
        }
        source.resume()
        return source
    }
    let (result, interrupted) = await withTaskGroup(of: InterruptibleEnd<Result>?.self) { group in
        group.addTask {
            do { return .finished(.success(try await body())) } catch { return .finished(.failure(error)) }
        }
        group.addTask {
            for await _ in interrupts { return .interrupted }
            return nil
        }
        var result: Swift.Result<Result, any Error> = .failure(CancellationError())
        var interrupted = false
        while let ended = await group.next() {
            switch ended {
            case .finished(let finished):
                result = finished
                interrupt.finish()
            case .interrupted:
                interrupted = true
                group.cancelAll()
            case nil:
                break
            }
        }
        return (result, interrupted)
    }
    await cleanup()
    for source in signals { source.cancel() }
    if interrupted, case .failure = result { throw Interrupted() }
    return try result.get()
}

/// How the body of ``runInterruptibly(_:cleanup:)`` or its signal watcher ended.
private enum InterruptibleEnd<Value: Sendable>: Sendable {
    case finished(Result<Value, any Error>)
    case interrupted
}

/// The run was stopped by SIGINT or SIGTERM.
struct Interrupted: Error, CustomStringConvertible {
    var description: String { "interrupted" }
}
