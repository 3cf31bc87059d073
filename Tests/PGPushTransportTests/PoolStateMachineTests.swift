import PGPushCore
import Testing

@testable import PGPushTransport

/// The pool's decisions driven with plain values: no socket, no event loop, no sleep.
@Suite("HTTP/2 pool state machine")
struct PoolStateMachineTests {
    typealias Machine = HTTP2PoolStateMachine

    private let refused = HTTP2ConnectFailure(detail: "connection refused")

    /// Back-off of n seconds after n failures, so tests can read it.
    static var timing: Machine.Timing {
        var timing = Machine.Timing()
        timing.backoff = { .seconds($0) }
        return timing
    }

    private func pool(tokenAuth: Bool = false) -> Machine {
        Machine(clientCap: 1000, singleStreamUntilFirstSuccess: tokenAuth, timing: Self.timing)
    }

    /// Starts the pool's slots; returns the connections they open.
    private func start(_ machine: inout Machine, slots: Int = 1) -> [Machine.ConnectionID] {
        machine.start(slots: slots).opened
    }

    /// Attaches and readies connection `id` with the server's stream `limit`.
    private func ready(_ machine: inout Machine, _ id: Machine.ConnectionID, limit: Int? = 10) {
        #expect(machine.connectionAttached(id).withoutTimers == [])
        #expect(machine.settingsReceived(id, maxConcurrentStreams: limit).withoutTimers == [.connectionReady(id)])
    }

    /// Starts one slot and readies its connection with the server's stream `limit`.
    private func connectReady(_ machine: inout Machine, limit: Int? = 10) -> Machine.ConnectionID {
        let id = start(&machine)[0]
        ready(&machine, id, limit: limit)
        return id
    }

    /// Takes `count` slots, all expected on connection `id`.
    private func lease(_ machine: inout Machine, _ count: Int, on id: Machine.ConnectionID) {
        for _ in 0..<count { #expect(machine.leaseRequested() == .leased(id)) }
    }

    private func ok() -> HTTP2StreamResult { .response(ProviderResponse(status: 200)) }

    // MARK: - Connecting

    @Test func noSlotBeforeTheConnectionIsReady() {
        var machine = pool()
        let id = start(&machine)[0]
        #expect(machine.leaseRequested() == .mustWait)
        _ = machine.connectionAttached(id)
        #expect(machine.leaseRequested() == .mustWait)
        #expect(machine.snapshot().connectionsOpen == 0)
    }

    @Test func settingsBeforeAttachHandSlotsOutOnAttach() {
        var machine = pool()
        let id = start(&machine)[0]
        let waiter = machine.waiterAdded()
        #expect(machine.waiterSuspending(waiter) == .mustWait)
        #expect(machine.settingsReceived(id, maxConcurrentStreams: 5).withoutTimers == [.connectionReady(id)])
        #expect(machine.connectionAttached(id) == [.leaseToWaiter(waiter, id)])
        #expect(machine.snapshot().streamsInFlight == 1)
    }

    @Test func connectFailureFailsWaitersAndLaterCallersFast() {
        var machine = pool()
        let id = start(&machine)[0]
        let waiter = machine.waiterAdded()
        #expect(machine.waiterSuspending(waiter) == .mustWait)
        let actions = machine.connectFailed(id, refused)
        #expect(actions.withoutTimers == [
            .connectionFailed(id, refused), .failWaiter(waiter, .connectFailed(detail: "connection refused")), .forgetConnection(id),
        ])
        #expect(machine.leaseRequested() == .failed(.connectFailed(detail: "connection refused")))
        #expect(machine.snapshot().connectFailures == 1)
        #expect(machine.isEmpty)
    }

    @Test func tlsRejectionIsWhatWaitersHear() {
        var machine = pool()
        let id = start(&machine)[0]
        _ = machine.connectFailed(id, HTTP2ConnectFailure(detail: "handshake", tlsRejection: "TLSCertificateExpired"))
        #expect(machine.leaseRequested() == .failed(.tlsRejected(reason: "TLSCertificateExpired")))
    }

    @Test func connectFailureWhileAnotherConnectionIsReadyKeepsWaitersWaiting() {
        var machine = pool()
        let ids = start(&machine, slots: 2)
        let (ready, second) = (ids[0], ids[1])
        self.ready(&machine, ready, limit: 1)
        #expect(machine.leaseRequested() == .leased(ready))
        let waiter = machine.waiterAdded()
        #expect(machine.waiterSuspending(waiter) == .mustWait)
        #expect(!machine.connectFailed(second, refused).contains(.failWaiter(waiter, .connectFailed(detail: "connection refused"))))
        #expect(machine.streamClosed(ready, result: ok(), retiresConnection: false).actions == [.leaseToWaiter(waiter, ready)])
    }

    @Test func attachedConnectionThatFailsIsClosedAndForgottenOnClose() {
        var machine = pool()
        let id = start(&machine)[0]
        _ = machine.connectionAttached(id)
        let failed = machine.connectFailed(id, refused)
        #expect(failed.withoutTimers == [.connectionFailed(id, refused), .closeConnection(id)])
        #expect(machine.channelClosed(id, failure: refused).withoutTimers == [.forgetConnection(id)])
        #expect(machine.isEmpty)
        #expect(machine.snapshot().connectFailures == 1)
    }

    @Test func readyConnectionClearsTheLastFailure() throws {
        var machine = pool()
        let backoff = try #require(machine.connectFailed(start(&machine)[0], refused).scheduled(.backoff(slot: 0)))
        let id = try #require(machine.timerFired(backoff).opened.first)
        _ = machine.connectionAttached(id)
        _ = machine.settingsReceived(id, maxConcurrentStreams: 10)
        #expect(machine.lastConnectFailure == nil)
        #expect(machine.leaseRequested() == .leased(id))
        #expect(machine.snapshot().reconnects == 1)
    }

    // MARK: - Stream limits

    @Test func leasesStopAtTheServerLimitAndResumeWhenAStreamEnds() {
        var machine = pool()
        let id = connectReady(&machine, limit: 2)
        lease(&machine, 2, on: id)
        #expect(machine.leaseRequested() == .mustWait)
        _ = machine.streamClosed(id, result: ok(), retiresConnection: false)
        #expect(machine.leaseRequested() == .leased(id))
        #expect(machine.snapshot().peakStreamsPerConnection == 2)
        #expect(machine.snapshot().requestsSent == 3)
    }

    @Test func loweredLimitStopsNewLeasesRaisedLimitGrantsWaiters() {
        var machine = pool()
        let id = connectReady(&machine, limit: 3)
        lease(&machine, 2, on: id)
        #expect(machine.settingsReceived(id, maxConcurrentStreams: 1) == [])
        let waiter = machine.waiterAdded()
        #expect(machine.waiterSuspending(waiter) == .mustWait)
        #expect(machine.settingsReceived(id, maxConcurrentStreams: 5) == [.leaseToWaiter(waiter, id)])
        #expect(machine.snapshot().effectiveStreamLimits == [5])
    }

    @Test func tokenAuthGetsOneStreamUntilTheFirstSuccess() {
        var machine = pool(tokenAuth: true)
        let id = connectReady(&machine, limit: 100)
        #expect(machine.leaseRequested() == .leased(id))
        #expect(machine.leaseRequested() == .mustWait)
        _ = machine.streamClosed(id, result: ok(), retiresConnection: false)
        #expect(machine.snapshot().effectiveStreamLimits == [100])
    }

    @Test func leasesGoToTheConnectionWithMostFreeSlots() {
        var machine = pool()
        let ids = start(&machine, slots: 2)
        let (first, second) = (ids[0], ids[1])
        ready(&machine, first, limit: 2)
        ready(&machine, second, limit: 5)
        #expect(machine.leaseRequested() == .leased(second))
        #expect(machine.snapshot().effectiveStreamLimits == [2, 5])
        #expect(machine.snapshot().connectionsReady == 2 && first != second)
    }

    // MARK: - GOAWAY and retirement

    @Test func goAwayRetiresDrainsAndForgetsTheConnection() {
        var machine = pool()
        let id = connectReady(&machine, limit: 10)
        lease(&machine, 2, on: id)
        let actions = machine.goAwayReceived(id, lastStreamID: 1, errorCode: 0, debugReason: APNsRules().goAwayReason(debugData: #"{"reason":"Shutdown"}"#))
        // The slot's next connection opens; this one young, after a back-off.
        #expect(actions.withoutTimers == [])
        #expect(actions.scheduled(.backoff(slot: 0))?.duration == .seconds(1))
        #expect(machine.goAwayDebugReason(id) == "Shutdown")
        #expect(machine.leaseRequested() == .mustWait)
        let dropped = machine.streamClosed(
            id, result: .closed(streamID: 3, resetCode: nil, sawHeadersWithoutStatus: false), retiresConnection: false)
        #expect(dropped.outcome == .noResponse(.goAwayNotProcessed(debugReason: "Shutdown")))
        #expect(dropped.actions == [])
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.closeConnection(id)])
        #expect(machine.channelClosed(id, failure: refused).withoutTimers == [.forgetConnection(id)])
        #expect(machine.isEmpty)
        #expect(machine.snapshot().goAwaysReceived == 1)
    }

    @Test func goAwayWithNothingInFlightClosesAtOnce() {
        var machine = pool()
        let id = connectReady(&machine)
        #expect(machine.goAwayReceived(id, lastStreamID: 0, errorCode: 0, debugReason: nil).withoutTimers == [.closeConnection(id)])
    }

    @Test func retiringAnswerRetiresTheConnection() {
        var machine = pool()
        let id = connectReady(&machine)
        lease(&machine, 2, on: id)
        let answer = HTTP2StreamResult.response(ProviderResponse(status: 403, reason: "UnrelatedKeyIdInToken"))
        #expect(machine.streamClosed(id, result: answer, retiresConnection: true).actions.withoutTimers == [])
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.closeConnection(id)])
    }

    @Test func retiredBeforeAttachClosesOnAttach() {
        var machine = pool()
        let id = start(&machine)[0]
        #expect(machine.shutdown().withoutTimers == [])
        #expect(machine.connectionAttached(id) == [.closeConnection(id)])
    }

    @Test func unansweredPingClosesTheConnection() throws {
        var machine = pool()
        let id = start(&machine)[0]
        _ = machine.connectionAttached(id)
        let interval = try #require(machine.settingsReceived(id, maxConcurrentStreams: 10).scheduled(.pingInterval(id)))
        let due = machine.timerFired(interval)
        #expect(due.withoutTimers == [.sendPing(id, payload: 1)])
        let timeout = try #require(due.scheduled(.pingTimeout(id, payload: 1)))
        #expect(timeout.duration == Self.timing.pingTimeout)
        let next = try #require(due.scheduled(.pingInterval(id)))
        #expect(machine.timerFired(next).withoutTimers == [], "one PING outstanding at a time")
        #expect(machine.timerFired(timeout).withoutTimers == [.closeConnection(id)])
    }

    @Test func answeredPingKeepsTheConnection() throws {
        var machine = pool()
        let id = start(&machine)[0]
        _ = machine.connectionAttached(id)
        let interval = try #require(machine.settingsReceived(id, maxConcurrentStreams: 10).scheduled(.pingInterval(id)))
        let due = machine.timerFired(interval)
        let timeout = try #require(due.scheduled(.pingTimeout(id, payload: 1)))
        #expect(machine.pingAckReceived(id, payload: 1) == [.cancelTimer(timeout.id)])
        #expect(machine.timerFired(timeout) == [], "a cancelled timer that fires anyway is ignored")
    }

    @Test func streamOnAForgottenConnectionEndsClosed() {
        var machine = pool()
        let id = connectReady(&machine)
        _ = machine.channelClosed(id, failure: refused)
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).outcome == .noResponse(.connectionClosed))
    }

    // MARK: - Waiters

    @Test func waitersAreServedOldestFirst() {
        var machine = pool()
        let id = connectReady(&machine, limit: 1)
        #expect(machine.leaseRequested() == .leased(id))
        let first = machine.waiterAdded(), second = machine.waiterAdded()
        #expect(machine.waiterSuspending(first) == .mustWait)
        #expect(machine.waiterSuspending(second) == .mustWait)
        // While callers wait, a newcomer does not jump the line.
        #expect(machine.leaseRequested() == .mustWait)
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.leaseToWaiter(first, id)])
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.leaseToWaiter(second, id)])
        #expect(machine.snapshot().callersWaiting == 0)
    }

    @Test func cancelledWaiterIsFailedAndSkipped() {
        var machine = pool()
        let id = connectReady(&machine, limit: 1)
        #expect(machine.leaseRequested() == .leased(id))
        let first = machine.waiterAdded(), second = machine.waiterAdded()
        _ = machine.waiterSuspending(first)
        _ = machine.waiterSuspending(second)
        #expect(machine.waiterCancelled(first) == .failWaiter(first, Machine.cancelledReason))
        #expect(machine.waiterCancelled(first) == nil)
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.leaseToWaiter(second, id)])
    }

    @Test func waiterCancelledBeforeSuspendingNeverWaits() {
        var machine = pool()
        let id = connectReady(&machine, limit: 1)
        #expect(machine.leaseRequested() == .leased(id))
        let waiter = machine.waiterAdded()
        #expect(machine.waiterCancelled(waiter) == nil)
        #expect(machine.waiterSuspending(waiter) == .failed(Machine.cancelledReason))
        #expect(machine.snapshot().callersWaiting == 0)
    }

    @Test func waiterSuspendingTakesASlotFreedSinceItsFirstTry() {
        var machine = pool()
        let id = connectReady(&machine, limit: 1)
        #expect(machine.leaseRequested() == .leased(id))
        #expect(machine.leaseRequested() == .mustWait)
        let waiter = machine.waiterAdded()
        _ = machine.streamClosed(id, result: ok(), retiresConnection: false)
        #expect(machine.waiterSuspending(waiter) == .leased(id))
    }

    // MARK: - Shutdown

    @Test func shutdownFailsWaitersRetiresConnectionsAndRefusesNewCallers() {
        var machine = pool()
        let id = connectReady(&machine, limit: 1)
        #expect(machine.leaseRequested() == .leased(id))
        let waiter = machine.waiterAdded()
        _ = machine.waiterSuspending(waiter)
        #expect(machine.shutdown().withoutTimers == [.failWaiter(waiter, Machine.shutDownReason)])
        #expect(machine.shutdown() == [])
        #expect(machine.isShuttingDown)
        #expect(machine.leaseRequested() == .failed(Machine.shutDownReason))
        // The stream in flight finishes, then the connection closes.
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.closeConnection(id)])
        #expect(machine.channelClosed(id, failure: refused).withoutTimers == [.forgetConnection(id), .shutdownComplete])
        #expect(machine.isEmpty)
    }

    @Test func shutdownClosesIdleConnectionsAtOnce() {
        var machine = pool()
        let id = connectReady(&machine)
        #expect(machine.shutdown().withoutTimers == [.closeConnection(id)])
    }

    // MARK: - Timers

    @Test func connectTimeoutStartsOnAttachAndStopsOnSettings() throws {
        var machine = pool()
        let id = start(&machine)[0]
        let timeout = try #require(machine.connectionAttached(id).scheduled(.connectTimeout(id)))
        #expect(timeout.duration == Self.timing.connectTimeout)
        let settings = machine.settingsReceived(id, maxConcurrentStreams: 10)
        #expect(settings.contains(.cancelTimer(timeout.id)))
        #expect(settings.scheduled(.pingInterval(id))?.duration == Self.timing.pingInterval)
        #expect(machine.timerFired(timeout) == [], "a connect timeout cancelled by SETTINGS is ignored")
        #expect(machine.hasReadyConnection)
    }

    @Test func connectTimeoutFailsTheAttemptClosesItAndBacksOff() throws {
        var machine = pool()
        let id = start(&machine)[0]
        let waiter = machine.waiterAdded()
        #expect(machine.waiterSuspending(waiter) == .mustWait)
        let timeout = try #require(machine.connectionAttached(id).scheduled(.connectTimeout(id)))
        let fired = machine.timerFired(timeout)
        let failure = Machine.connectTimeoutFailure
        #expect(fired.withoutTimers == [
            .connectionFailed(id, failure), .failWaiter(waiter, failure.noResponseReason), .closeConnection(id),
        ])
        #expect(fired.scheduled(.backoff(slot: 0))?.duration == .seconds(1))
        #expect(machine.snapshot().connectFailures == 1)
        // The close that follows is the same attempt, not a second failure.
        #expect(machine.channelClosed(id, failure: refused).withoutTimers == [.forgetConnection(id)])
        #expect(machine.snapshot().connectFailures == 1)
        #expect(machine.leaseRequested() == .failed(failure.noResponseReason))
    }

    @Test func backoffGrowsWithEachFailureAndResetsAfterAStableConnection() throws {
        var machine = pool()
        var id = start(&machine)[0]
        // Three failed attempts: 1 s, 2 s, 3 s.
        for failures in 1...3 {
            let backoff = try #require(machine.connectFailed(id, refused).scheduled(.backoff(slot: 0)))
            #expect(backoff.duration == .seconds(failures))
            id = try #require(machine.timerFired(backoff).opened.first)
        }
        #expect(machine.snapshot().reconnects == 3)
        #expect(machine.snapshot().connectFailures == 3)
        // The fourth attempt gets ready but dies young: the count goes on.
        ready(&machine, id)
        let retired = machine.goAwayReceived(id, lastStreamID: 0, errorCode: 0, debugReason: nil)
        #expect(retired.scheduled(.backoff(slot: 0))?.duration == .seconds(4))
        #expect(machine.timerFired(Machine.Timer(id: -1, kind: .backoff(slot: 0), duration: .zero)) == [], "an unknown timer is ignored")
    }

    @Test func aStableConnectionIsReplacedAtOnceAndTheNextFailureStartsOver() throws {
        var machine = pool()
        let opened = machine.start(slots: 1)
        let first = try #require(opened.opened.first)
        let stable = try #require(opened.scheduled(.stableLifetime(first)))
        #expect(stable.duration == Self.timing.stableLifetime)
        // One failure first, so the count has something to reset.
        let backoff = try #require(machine.connectFailed(first, refused).scheduled(.backoff(slot: 0)))
        let reopened = machine.timerFired(backoff)
        let id = try #require(reopened.opened.first)
        ready(&machine, id)
        #expect(machine.timerFired(try #require(reopened.scheduled(.stableLifetime(id)))) == [])
        // It retires after the stable lifetime: the replacement opens at once, no back-off.
        let retired = machine.goAwayReceived(id, lastStreamID: 0, errorCode: 0, debugReason: nil)
        let replacement = try #require(retired.opened.first)
        #expect(retired.scheduled(.backoff(slot: 0)) == nil)
        // The replacement fails: back-off starts again at one failure.
        #expect(machine.connectFailed(replacement, refused).scheduled(.backoff(slot: 0))?.duration == .seconds(1))
    }

    @Test func aConnectionThatDiesYoungCountsAsAFailure() throws {
        var machine = pool()
        let id = connectReady(&machine)
        let retired = machine.goAwayReceived(id, lastStreamID: 0, errorCode: 0, debugReason: nil)
        #expect(retired.opened == [])
        #expect(retired.scheduled(.backoff(slot: 0))?.duration == .seconds(1))
    }

    @Test func drainEndsWhenTheLastStreamEnds() throws {
        var machine = pool()
        let id = connectReady(&machine)
        lease(&machine, 1, on: id)
        let shutdown = machine.shutdown()
        let drain = try #require(shutdown.scheduled(.drain))
        #expect(drain.duration == Self.timing.drainTimeout)
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions.withoutTimers == [.closeConnection(id)])
        let closed = machine.channelClosed(id, failure: refused)
        #expect(closed.withoutTimers == [.forgetConnection(id), .shutdownComplete])
        #expect(closed.contains(.cancelTimer(drain.id)))
        #expect(machine.isShutDown)
    }

    @Test func drainDeadlineClosesWhatIsLeft() throws {
        var machine = pool()
        let id = connectReady(&machine)
        lease(&machine, 1, on: id)
        let drain = try #require(machine.shutdown().scheduled(.drain))
        #expect(machine.timerFired(drain).withoutTimers == [.closeConnection(id)])
        // Closed is enough: the stream still in flight reports on its own.
        let closed = machine.channelClosed(id, failure: refused)
        #expect(closed.withoutTimers == [.shutdownComplete])
        #expect(machine.streamClosed(id, result: .closed(streamID: 1, resetCode: nil, sawHeadersWithoutStatus: false),
                                     retiresConnection: false).outcome == .noResponse(.connectionClosed))
        #expect(machine.isEmpty)
    }

    @Test func shutdownCancelsEveryTimer() throws {
        var machine = pool()
        let ids = start(&machine, slots: 2)
        var scheduled: Set<Machine.TimerID> = []
        ready(&machine, ids[0])
        let backoff = try #require(machine.connectFailed(ids[1], refused).scheduled(.backoff(slot: 1)))
        scheduled.insert(backoff.id)
        let shutdown = machine.shutdown()
        #expect(shutdown.contains(.cancelTimer(backoff.id)))
        #expect(shutdown.withoutTimers == [.closeConnection(ids[0])])
        let closed = machine.channelClosed(ids[0], failure: refused)
        #expect(closed.withoutTimers == [.forgetConnection(ids[0]), .shutdownComplete])
        #expect(closed.contains(.cancelTimer(try #require(shutdown.scheduled(.drain)).id)))
        #expect(machine.timerFired(backoff) == [], "a back-off after shutdown opens nothing")
    }

    @Test func shutdownWithoutConnectionsCompletesAtOnce() {
        var machine = pool()
        #expect(machine.shutdown().withoutTimers == [.shutdownComplete])
        #expect(machine.start(slots: 2) == [])
    }

    @Test func forcedShutdownClosesAtOnceAndWaitsForAttemptsStillConnecting() {
        var machine = pool()
        let ids = start(&machine, slots: 2)
        ready(&machine, ids[0])
        lease(&machine, 1, on: ids[0])
        let forced = machine.shutdown(force: true)
        #expect(forced.withoutTimers == [.closeConnection(ids[0])])
        #expect(machine.channelClosed(ids[0], failure: refused).withoutTimers == [])
        // The second attempt's TCP connect finishes: it is closed on attach, and its close ends the shutdown.
        #expect(machine.connectionAttached(ids[1]) == [.closeConnection(ids[1])])
        #expect(machine.channelClosed(ids[1], failure: refused).withoutTimers.last == .shutdownComplete)
    }
}

extension [HTTP2PoolStateMachine.Action] {
    /// The actions without the timer bookkeeping and the slots' new connections.
    var withoutTimers: Self {
        filter {
            switch $0 {
            case .scheduleTimer, .cancelTimer, .openConnection: false
            default: true
            }
        }
    }

    /// The timer of `kind` these actions schedule.
    func scheduled(_ kind: HTTP2PoolStateMachine.Timer.Kind) -> HTTP2PoolStateMachine.Timer? {
        for case .scheduleTimer(let timer) in self where timer.kind == kind { return timer }
        return nil
    }

    /// The connections these actions open.
    var opened: [HTTP2PoolStateMachine.ConnectionID] {
        compactMap { if case .openConnection(let id) = $0 { id } else { nil } }
    }
}
