import PGPushCore
import Testing

@testable import PGPushTransport

/// The pool's decisions driven with plain values: no socket, no event loop, no sleep.
@Suite("HTTP/2 pool state machine")
struct PoolStateMachineTests {
    typealias Machine = HTTP2PoolStateMachine

    private let refused = HTTP2ConnectFailure(detail: "connection refused")

    private func pool(tokenAuth: Bool = false) -> Machine {
        Machine(clientCap: 1000, singleStreamUntilFirstSuccess: tokenAuth)
    }

    /// Connects, attaches and readies one connection with the server's stream `limit`.
    private func connectReady(_ machine: inout Machine, limit: Int? = 10) -> Machine.ConnectionID {
        let id = machine.connectRequested(isReplacement: false)
        #expect(machine.connectionAttached(id) == [])
        #expect(machine.settingsReceived(id, maxConcurrentStreams: limit) == [.connectionReady(id)])
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
        let id = machine.connectRequested(isReplacement: false)
        #expect(machine.leaseRequested() == .mustWait)
        _ = machine.connectionAttached(id)
        #expect(machine.leaseRequested() == .mustWait)
        #expect(machine.snapshot().connectionsOpen == 0)
    }

    @Test func settingsBeforeAttachHandSlotsOutOnAttach() {
        var machine = pool()
        let id = machine.connectRequested(isReplacement: false)
        let waiter = machine.waiterAdded()
        #expect(machine.waiterSuspending(waiter) == .mustWait)
        #expect(machine.settingsReceived(id, maxConcurrentStreams: 5) == [.connectionReady(id)])
        #expect(machine.connectionAttached(id) == [.leaseToWaiter(waiter, id)])
        #expect(machine.snapshot().streamsInFlight == 1)
    }

    @Test func connectFailureFailsWaitersAndLaterCallersFast() {
        var machine = pool()
        let id = machine.connectRequested(isReplacement: false)
        let waiter = machine.waiterAdded()
        #expect(machine.waiterSuspending(waiter) == .mustWait)
        let actions = machine.connectFailed(id, refused)
        #expect(actions == [
            .connectionFailed(id, refused), .connectionRetired(id), .forgetConnection(id),
            .failWaiter(waiter, .connectFailed(detail: "connection refused")),
        ])
        #expect(machine.leaseRequested() == .failed(.connectFailed(detail: "connection refused")))
        #expect(machine.snapshot().connectFailures == 1)
        #expect(machine.isEmpty)
    }

    @Test func tlsRejectionIsWhatWaitersHear() {
        var machine = pool()
        let id = machine.connectRequested(isReplacement: false)
        _ = machine.connectFailed(id, HTTP2ConnectFailure(detail: "handshake", tlsRejection: "TLSCertificateExpired"))
        #expect(machine.leaseRequested() == .failed(.tlsRejected(reason: "TLSCertificateExpired")))
    }

    @Test func connectFailureWhileAnotherConnectionIsReadyKeepsWaitersWaiting() {
        var machine = pool()
        let ready = connectReady(&machine, limit: 1)
        #expect(machine.leaseRequested() == .leased(ready))
        let second = machine.connectRequested(isReplacement: false)
        let waiter = machine.waiterAdded()
        #expect(machine.waiterSuspending(waiter) == .mustWait)
        #expect(!machine.connectFailed(second, refused).contains(.failWaiter(waiter, .connectFailed(detail: "connection refused"))))
        #expect(machine.streamClosed(ready, result: ok(), retiresConnection: false).actions == [.leaseToWaiter(waiter, ready)])
    }

    @Test func attachedConnectionThatFailsIsClosedAndForgottenOnClose() {
        var machine = pool()
        let id = machine.connectRequested(isReplacement: false)
        _ = machine.connectionAttached(id)
        #expect(machine.connectFailed(id, refused) == [.closeConnection(id)])
        let closed = machine.channelClosed(id, failure: refused)
        #expect(closed == [.connectionFailed(id, refused), .connectionRetired(id), .forgetConnection(id)])
        #expect(machine.isEmpty)
    }

    @Test func readyConnectionClearsTheLastFailure() {
        var machine = pool()
        _ = machine.connectFailed(machine.connectRequested(isReplacement: false), refused)
        let id = machine.connectRequested(isReplacement: true)
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
        let first = connectReady(&machine, limit: 2)
        let second = machine.connectRequested(isReplacement: false)
        _ = machine.connectionAttached(second)
        _ = machine.settingsReceived(second, maxConcurrentStreams: 5)
        #expect(machine.leaseRequested() == .leased(second))
        #expect(machine.snapshot().effectiveStreamLimits == [2, 5])
        #expect(machine.snapshot().connectionsReady == 2 && first != second)
    }

    // MARK: - GOAWAY and retirement

    @Test func goAwayRetiresDrainsAndForgetsTheConnection() {
        var machine = pool()
        let id = connectReady(&machine, limit: 10)
        lease(&machine, 2, on: id)
        let actions = machine.goAwayReceived(id, lastStreamID: 1, errorCode: 0, debugData: #"{"reason":"Shutdown"}"#)
        #expect(actions == [.connectionRetired(id)])
        #expect(machine.goAwayDebugReason(id) == "Shutdown")
        #expect(machine.leaseRequested() == .mustWait)
        let dropped = machine.streamClosed(
            id, result: .closed(streamID: 3, resetCode: nil, sawHeadersWithoutStatus: false), retiresConnection: false)
        #expect(dropped.outcome == .noResponse(.goAwayNotProcessed(debugReason: "Shutdown")))
        #expect(dropped.actions == [])
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.closeConnection(id)])
        #expect(machine.channelClosed(id, failure: refused) == [.forgetConnection(id)])
        #expect(machine.isEmpty)
        #expect(machine.snapshot().goAwaysReceived == 1)
    }

    @Test func goAwayWithNothingInFlightClosesAtOnce() {
        var machine = pool()
        let id = connectReady(&machine)
        #expect(machine.goAwayReceived(id, lastStreamID: 0, errorCode: 0, debugData: nil) == [
            .connectionRetired(id), .closeConnection(id),
        ])
    }

    @Test func retiringAnswerRetiresTheConnection() {
        var machine = pool()
        let id = connectReady(&machine)
        lease(&machine, 2, on: id)
        let answer = HTTP2StreamResult.response(ProviderResponse(status: 403, reason: "UnrelatedKeyIdInToken"))
        #expect(machine.streamClosed(id, result: answer, retiresConnection: true).actions == [.connectionRetired(id)])
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.closeConnection(id)])
    }

    @Test func retiredBeforeAttachClosesOnAttach() {
        var machine = pool()
        let id = machine.connectRequested(isReplacement: false)
        #expect(machine.shutdown() == [.connectionRetired(id)])
        #expect(machine.connectionAttached(id) == [.closeConnection(id)])
    }

    @Test func unansweredPingClosesTheConnection() {
        var machine = pool()
        let id = connectReady(&machine)
        #expect(machine.pingDue(id) == [.sendPing(id, payload: 1)])
        #expect(machine.pingDue(id) == [])
        #expect(machine.pingTimedOut(id, payload: 1) == [.connectionRetired(id), .closeConnection(id)])
    }

    @Test func answeredPingKeepsTheConnection() {
        var machine = pool()
        let id = connectReady(&machine)
        #expect(machine.pingDue(id) == [.sendPing(id, payload: 1)])
        #expect(machine.pingAckReceived(id, payload: 1) == [])
        #expect(machine.pingTimedOut(id, payload: 1) == [])
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
        #expect(machine.shutdown() == [.failWaiter(waiter, Machine.shutDownReason), .connectionRetired(id)])
        #expect(machine.shutdown() == [])
        #expect(machine.isShuttingDown)
        #expect(machine.leaseRequested() == .failed(Machine.shutDownReason))
        // The stream in flight finishes, then the connection closes.
        #expect(machine.streamClosed(id, result: ok(), retiresConnection: false).actions == [.closeConnection(id)])
        #expect(machine.channelClosed(id, failure: refused) == [.forgetConnection(id)])
        #expect(machine.isEmpty)
    }

    @Test func shutdownClosesIdleConnectionsAtOnce() {
        var machine = pool()
        let id = connectReady(&machine)
        #expect(machine.shutdown() == [.connectionRetired(id), .closeConnection(id)])
    }
}
