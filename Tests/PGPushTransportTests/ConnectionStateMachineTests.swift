import PGPushCore
import Testing

@testable import PGPushTransport

@Suite("APNs connection state machine")
struct ConnectionStateMachineTests {
    typealias Machine = HTTP2ConnectionStateMachine

    private func readyMachine(serverLimit: Int = 1000, cap: Int = 1000, tokenAuth: Bool = false) -> Machine {
        var machine = Machine(clientCap: cap, singleStreamUntilFirstSuccess: tokenAuth)
        _ = machine.settingsReceived(maxConcurrentStreams: serverLimit)
        return machine
    }

    @Test func connectingAllowsNoStreams() {
        let machine = Machine(clientCap: 1000, singleStreamUntilFirstSuccess: false)
        #expect(machine.state == .connecting)
        #expect(machine.effectiveLimit == 0)
        #expect(!machine.canOpenStream)
    }

    @Test func firstSettingsMakesReadyAndOffersSlots() {
        var machine = Machine(clientCap: 1000, singleStreamUntilFirstSuccess: false)
        #expect(machine.settingsReceived(maxConcurrentStreams: 500) == .streamSlotsAvailable)
        #expect(machine.state == .ready)
        #expect(machine.effectiveLimit == 500)
    }

    @Test func settingsWithoutLimitMeansClientCap() {
        var machine = Machine(clientCap: 300, singleStreamUntilFirstSuccess: false)
        _ = machine.settingsReceived(maxConcurrentStreams: nil)
        #expect(machine.effectiveLimit == 300)
    }

    @Test func clientCapWinsOverHigherServerLimit() {
        let machine = readyMachine(serverLimit: 5000, cap: 1000)
        #expect(machine.effectiveLimit == 1000)
    }

    @Test func tokenAuthGetsOneStreamUntilFirstSuccess() {
        var machine = readyMachine(serverLimit: 1000, tokenAuth: true)
        #expect(machine.effectiveLimit == 1)
        machine.streamOpened()
        #expect(!machine.canOpenStream)
        // A rejection does not lift the one-stream rule.
        #expect(machine.streamCompleted(status: 403) == .streamSlotsAvailable)
        #expect(machine.effectiveLimit == 1)
        machine.streamOpened()
        _ = machine.streamCompleted(status: 200)
        #expect(machine.effectiveLimit == 1000)
    }

    @Test func tokenAuthFollowsServerRaisingLimitAfterSuccess() {
        var machine = readyMachine(serverLimit: 1, tokenAuth: true)
        machine.streamOpened()
        _ = machine.streamCompleted(status: 200)
        #expect(machine.effectiveLimit == 1)
        #expect(machine.settingsReceived(maxConcurrentStreams: 1000) == .streamSlotsAvailable)
        #expect(machine.effectiveLimit == 1000)
    }

    @Test func serverLoweringLimitStopsNewStreamsUntilBelow() {
        var machine = readyMachine(serverLimit: 10)
        for _ in 0..<8 { machine.streamOpened() }
        #expect(machine.settingsReceived(maxConcurrentStreams: 5) == .none)
        #expect(machine.effectiveLimit == 5)
        #expect(!machine.canOpenStream)
        for _ in 0..<3 { #expect(machine.streamCompleted(status: 200) == .none) }
        #expect(machine.inFlight == 5)
        #expect(machine.streamCompleted(status: 200) == .streamSlotsAvailable)
        #expect(machine.canOpenStream)
        #expect(machine.peakInFlight == 8)
    }

    @Test func streamCountingTracksPeak() {
        var machine = readyMachine(serverLimit: 3)
        machine.streamOpened()
        machine.streamOpened()
        machine.streamOpened()
        #expect(!machine.canOpenStream)
        #expect(machine.streamCompleted(status: 200) == .streamSlotsAvailable)
        #expect(machine.inFlight == 2)
        #expect(machine.peakInFlight == 3)
    }

    @Test func goAwayWithStreamsInFlightRetiresAndDrains() {
        var machine = readyMachine()
        machine.streamOpened()
        machine.streamOpened()
        let action = machine.goAwayReceived(lastStreamID: 1, errorCode: 0, debugReason: APNsRules().goAwayReason(debugData: #"{"reason":"Shutdown"}"#))
        #expect(action == .retire(.goAway(errorCode: 0, debugReason: "Shutdown")))
        #expect(!machine.canOpenStream)
        #expect(machine.effectiveLimit == 0)
        #expect(machine.goAwayDebugReason == "Shutdown")
        #expect(machine.streamCompleted(status: 200) == .none)
        #expect(machine.streamCompleted(status: nil) == .close)
    }

    @Test func goAwayWhenIdleRetiresAndCloses() {
        var machine = readyMachine()
        #expect(machine.goAwayReceived(lastStreamID: 0, errorCode: 0, debugReason: nil)
            == .retireAndClose(.goAway(errorCode: 0, debugReason: nil)))
    }

    @Test func secondGoAwayIsNoNewActionButLowersLastStreamID() {
        var machine = readyMachine()
        machine.streamOpened()
        _ = machine.goAwayReceived(lastStreamID: 99, errorCode: 0, debugReason: nil)
        #expect(machine.goAwayReceived(lastStreamID: 7, errorCode: 2, debugReason: nil) == .none)
        #expect(machine.goAwayLastStreamID == 7)
    }

    @Test func streamsAboveLastStreamIDWereNotProcessed() {
        var machine = readyMachine()
        machine.streamOpened()
        _ = machine.goAwayReceived(lastStreamID: 5, errorCode: 0, debugReason: APNsRules().goAwayReason(debugData: #"{"reason":"Shutdown"}"#))
        #expect(machine.noResponseReason(streamID: 7, resetCode: Machine.refusedStreamCode)
            == .goAwayNotProcessed(debugReason: "Shutdown"))
        #expect(machine.noResponseReason(streamID: nil, resetCode: nil) == .goAwayNotProcessed(debugReason: "Shutdown"))
        // At or below last-stream-id the server may have processed it.
        #expect(machine.noResponseReason(streamID: 5, resetCode: nil) == .connectionClosed)
        #expect(machine.noResponseReason(streamID: 3, resetCode: Machine.refusedStreamCode) == .refusedStream)
    }

    @Test func resetReasonsWithoutGoAway() {
        let machine = readyMachine()
        #expect(machine.noResponseReason(streamID: 3, resetCode: Machine.refusedStreamCode) == .refusedStream)
        #expect(machine.noResponseReason(streamID: 3, resetCode: 0x8) == .connectionClosed)
        #expect(machine.noResponseReason(streamID: 3, resetCode: nil) == .connectionClosed)
    }

    @Test func goAwayDebugDataThatIsNotJSONHasNoReason() {
        var machine = readyMachine()
        machine.streamOpened()
        #expect(machine.goAwayReceived(lastStreamID: 1, errorCode: 0, debugReason: APNsRules().goAwayReason(debugData: "bye"))
            == .retire(.goAway(errorCode: 0, debugReason: nil)))
    }

    @Test func retireForResponseReason() {
        var machine = readyMachine()
        machine.streamOpened()
        #expect(machine.retire(.response(reason: "UnrelatedKeyIdInToken")) == .retire(.response(reason: "UnrelatedKeyIdInToken")))
        #expect(machine.retire(.response(reason: "Shutdown")) == .none)
        #expect(machine.streamCompleted(status: 403) == .close)
    }

    @Test func retireWhileConnectingCloses() {
        var machine = Machine(clientCap: 10, singleStreamUntilFirstSuccess: true)
        #expect(machine.retire(.poolShutdown) == .retireAndClose(.poolShutdown))
        // A late SETTINGS does not revive it.
        _ = machine.settingsReceived(maxConcurrentStreams: 100)
        #expect(!machine.canOpenStream)
    }

    @Test func pingSendAckAndNoDoublePing() {
        var machine = readyMachine()
        guard case .sendPing(let payload) = machine.pingDue() else {
            Issue.record("expected a ping")
            return
        }
        #expect(machine.pingDue() == .none)
        machine.pingAckReceived(payload)
        #expect(machine.outstandingPing == nil)
        #expect(machine.pingTimeoutFired(payload) == .none)
        guard case .sendPing(let next) = machine.pingDue() else {
            Issue.record("expected a second ping")
            return
        }
        #expect(next != payload)
    }

    @Test func pingTimeoutRetiresAndCloses() {
        var machine = readyMachine()
        machine.streamOpened()
        guard case .sendPing(let payload) = machine.pingDue() else {
            Issue.record("expected a ping")
            return
        }
        machine.pingAckReceived(payload &+ 100)  // an unrelated ACK does not count
        #expect(machine.pingTimeoutFired(payload) == .retireAndClose(.pingTimeout))
        #expect(!machine.canOpenStream)
    }

    @Test func noPingWhileConnecting() {
        var machine = Machine(clientCap: 10, singleStreamUntilFirstSuccess: false)
        #expect(machine.pingDue() == .none)
    }

    @Test func channelClosedFromReadyRetires() {
        var machine = readyMachine()
        machine.streamOpened()
        #expect(machine.channelClosed() == .retire(.channelClosed))
        #expect(machine.isClosed)
        #expect(!machine.canOpenStream)
        #expect(machine.streamCompleted(status: nil) == .none)
        #expect(machine.inFlight == 0)
        #expect(machine.channelClosed() == .none)
    }

    @Test func channelClosedWhileDrainingNeedsNoNewRetire() {
        var machine = readyMachine()
        machine.streamOpened()
        _ = machine.goAwayReceived(lastStreamID: 1, errorCode: 0, debugReason: nil)
        #expect(machine.channelClosed() == .none)
        #expect(machine.isClosed)
    }

    @Test func responseBodyParsing() {
        let body = APNsResponseBody.parse(Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8))
        #expect(body.reason == "Unregistered")
        #expect(body.timestampMilliseconds == 1_700_000_000_123)
        #expect(APNsResponseBody.parse([]).reason == nil)
        #expect(APNsResponseBody.parse(Array("<html>".utf8)).reason == nil)
    }
}
