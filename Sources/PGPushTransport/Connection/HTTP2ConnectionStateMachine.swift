import PGPushCore

/// Why a connection stopped taking new streams.
enum HTTP2RetireReason: Sendable, Hashable, CustomStringConvertible {
    /// The server sent GOAWAY. `debugReason` is the reason the provider's rules read in its debug data, if any.
    case goAway(errorCode: UInt32, debugReason: String?)
    /// A response reason after which the provider expects a fresh connection (its rules say which).
    case response(reason: String)
    /// A PING went unanswered.
    case pingTimeout
    /// The channel closed (reset, EOF, TLS failure).
    case channelClosed
    /// The pool is shutting down.
    case poolShutdown

    var description: String {
        switch self {
        case .goAway(let code, let reason): "GOAWAY(code \(code)\(reason.map { ", reason \($0)" } ?? ""))"
        case .response(let reason): "response \(reason)"
        case .pingTimeout: "ping timeout"
        case .channelClosed: "channel closed"
        case .poolShutdown: "pool shutdown"
        }
    }
}

/// The life of one provider HTTP/2 connection as a pure value: connecting → ready(limit, in flight) → draining → closed.
///
/// It decides how many streams may be open (the live server limit, the client cap, and a provider's rule that
/// token authentication gets one stream until a request succeeds), what a stream that ended without a response means,
/// and when to ping or close. The owner performs the returned ``Action``s; this type does no I/O.
struct HTTP2ConnectionStateMachine: Sendable {
    /// What the owner must do after an event.
    enum Action: Sendable, Hashable {
        case none
        /// More streams may open now: hand free slots to waiting callers.
        case streamSlotsAvailable
        /// Stop opening streams and start a replacement; keep the channel open while streams finish.
        case retire(HTTP2RetireReason)
        /// As ``retire(_:)``, and close the channel now: nothing is in flight (or the connection is unusable).
        case retireAndClose(HTTP2RetireReason)
        /// The connection was already retired and its last stream finished: close the channel.
        case close
        /// Write a PING with this payload and arm its timeout.
        case sendPing(UInt64)
    }

    enum State: Sendable, Hashable {
        case connecting
        case ready
        case draining(HTTP2RetireReason)
        case closed
    }

    private(set) var state: State = .connecting
    /// The server's last advertised `SETTINGS_MAX_CONCURRENT_STREAMS`; `nil` means it never set one (unlimited).
    private(set) var serverLimit: Int?
    /// Whether a request has succeeded on this connection (a one-stream start ends then).
    private(set) var hasSucceeded: Bool
    private(set) var inFlight = 0
    /// The most streams that were ever open at once, for tests and statistics.
    private(set) var peakInFlight = 0
    /// The last-stream-id of the first GOAWAY received.
    private(set) var goAwayLastStreamID: Int?
    /// The debug reason of the first GOAWAY that carried one.
    private(set) var goAwayDebugReason: String?
    private(set) var outstandingPing: UInt64?
    private var nextPingPayload: UInt64 = 1

    let clientCap: Int

    /// - Parameters:
    ///   - clientCap: The client's own ceiling on concurrent streams.
    ///   - singleStreamUntilFirstSuccess: `true` for token authentication.
    init(clientCap: Int, singleStreamUntilFirstSuccess: Bool) {
        self.clientCap = max(1, clientCap)
        self.hasSucceeded = !singleStreamUntilFirstSuccess
    }

    /// How many streams may be open at once right now; 0 unless ready.
    var effectiveLimit: Int {
        guard case .ready = state else { return 0 }
        let serverOrCap = min(serverLimit ?? clientCap, clientCap)
        return hasSucceeded ? serverOrCap : min(1, serverOrCap)
    }

    /// Whether one more stream may open.
    var canOpenStream: Bool { inFlight < effectiveLimit }

    var isReady: Bool { state == .ready }
    var isClosed: Bool { state == .closed }

    // MARK: - Events

    /// A SETTINGS frame arrived. `maxConcurrentStreams` is `nil` when the frame did not carry that setting.
    /// The first SETTINGS makes the connection ready (the server's preface).
    mutating func settingsReceived(maxConcurrentStreams: Int?) -> Action {
        let before = effectiveLimit
        if let maxConcurrentStreams { serverLimit = max(0, maxConcurrentStreams) }
        if state == .connecting { state = .ready }
        return effectiveLimit > before && canOpenStream ? .streamSlotsAvailable : .none
    }

    /// The owner opened a stream. Call only when ``canOpenStream`` is `true`.
    mutating func streamOpened() {
        precondition(canOpenStream, "stream opened beyond the effective limit")
        inFlight += 1
        peakInFlight = max(peakInFlight, inFlight)
    }

    /// A stream finished. `status` is the HTTP status, `nil` when no response came.
    mutating func streamCompleted(status: Int?) -> Action {
        precondition(inFlight > 0, "stream completed with none in flight")
        inFlight -= 1
        // Any success proves the credential: the channel management API answers 201 and 204.
        if let status, (200..<300).contains(status) { hasSucceeded = true }
        switch state {
        case .ready:
            return canOpenStream ? .streamSlotsAvailable : .none
        case .draining:
            return inFlight == 0 ? .close : .none
        case .connecting, .closed:
            return .none
        }
    }

    /// A GOAWAY arrived. No new streams open; streams above `lastStreamID` will end unprocessed.
    /// `debugReason` is what the provider's rules read in its debug data (``HTTP2ProviderRules/goAwayReason(debugData:)``).
    mutating func goAwayReceived(lastStreamID: Int, errorCode: UInt32, debugReason: String?) -> Action {
        goAwayLastStreamID = min(goAwayLastStreamID ?? lastStreamID, lastStreamID)
        if goAwayDebugReason == nil { goAwayDebugReason = debugReason }
        return retire(.goAway(errorCode: errorCode, debugReason: debugReason))
    }

    /// Stop opening streams on this connection, for example after an answer that retires it.
    mutating func retire(_ reason: HTTP2RetireReason) -> Action {
        switch state {
        case .connecting, .ready:
            state = .draining(reason)
            return inFlight == 0 ? .retireAndClose(reason) : .retire(reason)
        case .draining, .closed:
            return .none
        }
    }

    /// The PING timer fired: send one unless one is still outstanding.
    mutating func pingDue() -> Action {
        guard state == .ready || isDraining, outstandingPing == nil else { return .none }
        let payload = nextPingPayload
        nextPingPayload &+= 1
        outstandingPing = payload
        return .sendPing(payload)
    }

    /// A PING ACK arrived.
    mutating func pingAckReceived(_ payload: UInt64) {
        if outstandingPing == payload { outstandingPing = nil }
    }

    /// The timeout armed for PING `payload` fired.
    mutating func pingTimeoutFired(_ payload: UInt64) -> Action {
        guard outstandingPing == payload else { return .none }
        outstandingPing = nil
        switch state {
        case .connecting, .ready:
            state = .draining(.pingTimeout)
            return .retireAndClose(.pingTimeout)
        case .draining:
            return .close
        case .closed:
            return .none
        }
    }

    /// The channel closed. Streams still counted in flight will complete on their own.
    mutating func channelClosed() -> Action {
        switch state {
        case .connecting, .ready:
            state = .closed
            return .retire(.channelClosed)
        case .draining:
            state = .closed
            return .none
        case .closed:
            return .none
        }
    }

    // MARK: - Outcomes

    /// What a stream that ended without a response means.
    /// - Parameters:
    ///   - streamID: The stream's id, `nil` if it never reached the wire.
    ///   - resetCode: The RST_STREAM (or GOAWAY-implied) error code, if the stream was reset.
    func noResponseReason(streamID: Int?, resetCode: UInt32?) -> ProviderNoResponseReason {
        if let goAwayLastStreamID, streamID.map({ $0 > goAwayLastStreamID }) ?? true {
            return .goAwayNotProcessed(debugReason: goAwayDebugReason)
        }
        if resetCode == Self.refusedStreamCode { return .refusedStream }
        return .connectionClosed
    }

    static let refusedStreamCode: UInt32 = 0x7


    private var isDraining: Bool {
        if case .draining = state { return true }
        return false
    }
}
