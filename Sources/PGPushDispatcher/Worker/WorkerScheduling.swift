import Logging
import PGPushStore
import ServiceLifecycle
import Synchronization

/// The worker's ``WorkerStateMachine`` under its lock, and what carries out the actions it returns: the claim
/// and expansion wakes, the result writer's inbox and the lifecycle's shutdown. Services report what happened
/// with ``decide(_:)`` and hand the actions to ``perform(_:)``; the ones only the asking service can carry out
/// (a claim, an expansion, stopping its loop) it carries out itself.
final class WorkerScheduling: Sendable {
    typealias Machine = WorkerStateMachine<ChunkCompletion>
    typealias Action = Machine.Action

    private let machine: Mutex<Machine>
    let claimWake = Wake()
    let expansionWake = Wake()
    /// The chunks' completions, batched for the result writer (``Action/write(_:)``).
    let writes: AsyncStream<[ChunkCompletion]>
    private let writeInbox: AsyncStream<[ChunkCompletion]>.Continuation
    private let lifecycle: WorkerLifecycle
    private let logger: Logger

    init(_ machine: Machine, lifecycle: WorkerLifecycle, logger: Logger) {
        self.machine = Mutex(machine)
        self.lifecycle = lifecycle
        self.logger = logger
        (writes, writeInbox) = AsyncStream.makeStream(of: [ChunkCompletion].self)
    }

    /// Reports to the state machine, or reads it, under its lock.
    func decide<Result>(_ body: (inout Machine) -> Result) -> Result {
        machine.withLock { body(&$0) }
    }

    /// Carries out what the state machine decided.
    func perform(_ action: Action) {
        switch action {
        case .wakeClaimer: claimWake.signal()
        case .wakeExpander: expansionWake.signal()
        case .write(let batch): writeInbox.yield(batch)
        case .stopSending: lifecycle.beginShutdown()
        case .abandonWrites(let completions, let tokens):
            logger.error("shutdown: results could not be written within the grace period; their chunks are rescued when the lease runs out", metadata: [
                "completions": "\(completions)", "notifications": "\(tokens)",
            ])
        case .claim, .stopClaiming, .expand, .expandSmallJobs, .expandAt, .none:
            // The service that asked carries these out itself.
            break
        }
    }

    func perform(_ actions: [Action]) {
        for action in actions { perform(action) }
    }

    /// Wakes the result writer to see whether anything is left to write (its graceful shutdown).
    func wakeWriter() {
        writeInbox.yield([])
    }

    /// Runs `work` until it ends, or until a graceful shutdown's grace period is over, whichever comes first;
    /// then cancels the other. Returns true when `work` ended first.
    func withinGracePeriod(_ work: @escaping @Sendable () async -> Void) async -> Bool {
        await withTaskGroup(of: Bool.self) { race in
            race.addTask { await work(); return true }
            race.addTask { await self.sleepUntilGraceIsOver(); return false }
            let workEnded = await race.next() ?? true
            race.cancelAll()
            return workEnded
        }
    }

    /// Returns once a graceful shutdown has started and its grace period is over, or when cancelled.
    private func sleepUntilGraceIsOver() async {
        do {
            try await gracefulShutdown()
            // Normally the claim service started the shutdown; whichever service gets here first sets the deadline.
            let (started, deadline) = decide { ($0.shutdownRequested(at: .now), $0.graceDeadline) }
            perform(started)
            guard let deadline else { return }
            try await Task.sleep(until: deadline, clock: .continuous)
        } catch {
            // Cancelled: the work this raced against ended first.
        }
    }
}
