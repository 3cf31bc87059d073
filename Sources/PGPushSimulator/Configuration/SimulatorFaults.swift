/// Injected failures. Every random choice derives from ``seed``, so the same seed and the same requests per
/// token give the same outcomes.
public struct SimulatorFaults: Sendable {
    /// What a GOAWAY fault does to the streams in flight.
    public enum GoAwayMode: String, Sendable, Hashable, CaseIterable {
        /// GOAWAY NO_ERROR with last-stream-id = the highest stream received; those finish, then the connection closes.
        case noError
        /// GOAWAY with last-stream-id below the streams still in flight; they are dropped unanswered and the
        /// connection closes at once.
        case abortInFlight
    }

    /// Seed of every random choice. Default 1.
    public var seed: UInt64 = 1
    /// Fraction of requests answered 500 InternalServerError or 503 ServiceUnavailable (half each). Default 0.
    public var serverErrorRate: Double = 0
    /// Fraction of device tokens (chosen by a hash of token and seed) answered 429 TooManyRequests on their
    /// first ``tooManyRequestsFirstAttempts`` attempts. Default 0.
    public var tooManyRequestsTokenFraction: Double = 0
    /// How many attempts of an affected token get 429 before it is accepted. Default 1.
    public var tooManyRequestsFirstAttempts: Int = 1
    /// Send a GOAWAY once a connection has received this many requests. Default `nil` (never).
    public var goAwayEveryStreams: Int? = nil
    /// How the GOAWAY fault treats streams in flight. Default ``GoAwayMode/noError``.
    public var goAwayMode: GoAwayMode = .noError
    /// The GOAWAY debug data in ``GoAwayMode/abortInFlight`` mode. Default `{"reason":"Shutdown"}`.
    public var goAwayDebugData: String = #"{"reason":"Shutdown"}"#
    /// Close the TCP connection abruptly (unanswered) when a connection receives its N-th request. Default `nil`.
    public var resetEveryStreams: Int? = nil
    /// Delay before each answer. Default ``SimulatorLatency/none``.
    public var latency: SimulatorLatency = .none
    /// Fraction of requests answered in a shape APNs never sends (see ``MalformedAnswer``), for testing that
    /// a client gives every request an outcome anyway. Default 0.
    public var malformedAnswerRate: Double = 0
    /// Errors of the broadcast channel management API (its own port). Default: none.
    public var channelManagement: SimulatorRequestFaults = .init()
    /// Errors of broadcast sends (`POST /4/broadcasts/apps/…` on the device port), instead of the per-token
    /// faults above, which need a device token. Default: none.
    public var broadcast: SimulatorRequestFaults = .init()

    /// No faults.
    public init() {}

    /// Whether per-token attempt counting is needed at all; keeps the fault-free path lock-free.
    var needsAttemptCounting: Bool { serverErrorRate > 0 || tooManyRequestsTokenFraction > 0 }

    /// The faults the shared transport carries out.
    var connectionFaults: SimulatorConnectionFaults {
        SimulatorConnectionFaults(goAwayEveryStreams: goAwayEveryStreams, goAwayMode: goAwayMode,
                                  goAwayDebugData: goAwayDebugData, resetEveryStreams: resetEveryStreams)
    }
}

/// Connection-level faults, the same for every protocol a simulator speaks: GOAWAY or an abrupt close when
/// the server's request count reaches a multiple of N.
struct SimulatorConnectionFaults: Sendable, Hashable {
    var goAwayEveryStreams: Int?
    var goAwayMode: SimulatorFaults.GoAwayMode
    var goAwayDebugData: String
    var resetEveryStreams: Int?
}

/// SplitMix64: a tiny, well-mixed deterministic hash for fault decisions.
enum FaultHash {
    static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// FNV-1a of the token mixed with the seed and an extra discriminator; stable across processes (unlike `Hasher`).
    static func hash(_ token: String, seed: UInt64, salt: UInt64) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in token.utf8 {
            h = (h ^ UInt64(byte)) &* 0x100_0000_01B3
        }
        return mix(h ^ mix(seed ^ mix(salt)))
    }

    /// A value in [0, 1) from a hash.
    static func unit(_ hash: UInt64) -> Double {
        Double(hash >> 11) / Double(UInt64(1) << 53)
    }
}

/// Answers no APNs server sends, one of which a malformed-answer fault picks per request.
public enum MalformedAnswer: String, Sendable, Hashable, CaseIterable {
    /// A status APNs does not use (299, 418, 451, 520, 999) with a JSON reason.
    case unknownStatus
    /// 400 with a body that is not `{"reason":"…"}`: broken JSON, a number for the reason, empty, or 64 KB.
    case badReasonBody
    /// 200 with a 20,000-byte header.
    case hugeHeader
    /// 400 whose reason is followed by trailers.
    case trailers
    /// A normal answer, then a DATA frame on the same stream after END_STREAM.
    case dataAfterEndStream
}
