import NIOHPACK
import PGPushCore
import PGPushDispatcher
import PGPushTransport
import Synchronization

/// A connection pool that answers in-process, as a test tells it: at once, after a delay on a ``TestClock``,
/// with any status or none, or not until the test releases the request (``answerHeld(with:)``) or the pool
/// stops. It records every request it was given, in order.
public final class FakePushPool: PushConnectionPool {
    /// One request as the pool saw it.
    public struct Request: Sendable, Hashable {
        /// The device token: the last component of the request's `:path`.
        public var token: String
        public var path: String
        /// The `apns-push-type`, `apns-topic`, `apns-expiration` and the other headers, by name.
        public var headers: [String: String]
        public var body: [UInt8]
    }

    /// How the pool answers one request.
    public enum Answer: Sendable {
        /// At once, with this outcome.
        case now(ProviderOutcome)
        /// When the test clock has moved on this long.
        case after(Duration, ProviderOutcome)
        /// Not until the test calls ``answerHeld(with:)``, or the pool stops (``stop()``): then as a closed
        /// connection.
        case hold
    }

    private struct State {
        var requests: [Request] = []
        var held: [PushSubmission] = []
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())
    private let clock: TestClock?
    private let answer: @Sendable (Request) -> Answer

    /// - Parameters:
    ///   - clock: the clock `.after` answers wait on (required for them).
    ///   - answer: how each request is answered; by default 200 at once.
    public init(clock: TestClock? = nil, answer: @escaping @Sendable (Request) -> Answer = { _ in .now(.ok) }) {
        self.clock = clock
        self.answer = answer
    }

    /// Every request received, in order.
    public var requests: [Request] { state.withLock(\.requests) }
    /// The tokens of ``requests``.
    public var tokens: [String] { requests.map(\.token) }
    /// Requests waiting for ``answerHeld(with:)``.
    public var heldCount: Int { state.withLock(\.held.count) }

    public func start(_ batch: [PushSubmission]) async {
        for submission in batch { handle(submission) }
    }

    public func send(_ request: some PushRequest) async -> ProviderOutcome {
        let seen = describe(request)
        let answer = answer(seen)
        record(seen)
        switch answer {
        case .now(let outcome), .after(_, let outcome): return outcome
        case .hold: return .noResponse(.connectionClosed)
        }
    }

    /// Waits until the pool has received `count` requests in all.
    public func waitForRequests(_ count: Int) async {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Bool in
                if state.requests.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Answers every held request with `outcome`; returns how many.
    @discardableResult
    public func answerHeld(with outcome: ProviderOutcome) -> Int {
        let held = state.withLock { state in
            defer { state.held = [] }
            return state.held
        }
        for submission in held { submission.onOutcome(outcome) }
        return held.count
    }

    /// Ends every held request as a closed connection does, as a pool that stops.
    public func stop() {
        answerHeld(with: .noResponse(.connectionClosed))
    }

    public func run() async throws {
        // Runs until cancelled, then fails what it still holds, as a pool closing its connections does.
        let (never, _) = AsyncStream.makeStream(of: Void.self)
        for await _ in never {}
        stop()
    }

    public var statistics: HTTP2PoolStatistics { HTTP2PoolStatistics() }

    private func handle(_ submission: PushSubmission) {
        let seen = describe(submission.request)
        let answer = answer(seen)
        // A held request is held before the request is counted: a test that waited for N requests and then
        // answers the held ones must find all N of them held.
        record(seen, holding: { if case .hold = answer { return submission } else { return nil } }())
        switch answer {
        case .now(let outcome):
            submission.onOutcome(outcome)
        case .after(let delay, let outcome):
            guard let clock else { preconditionFailure("FakePushPool: an .after answer needs a clock") }
            clock.schedule(after: delay) { submission.onOutcome(outcome) }
        case .hold:
            break
        }
    }

    private func describe(_ request: some PushRequest) -> Request {
        let headers = request.headers(authority: "fake.invalid", authorization: nil)
        var byName: [String: String] = [:]
        for (name, value, _) in headers { byName[name] = value }
        let path = byName[":path"] ?? ""
        return Request(token: String(path.split(separator: "/").last ?? ""), path: path, headers: byName, body: request.body)
    }

    private func record(_ seen: Request, holding held: PushSubmission? = nil) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            if let held { state.held.append(held) }
            state.requests.append(seen)
            let count = state.requests.count
            let ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
            state.waiters.removeAll { $0.count <= count }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }
}

extension ProviderOutcome {
    /// 200: delivered.
    public static let ok = ProviderOutcome.response(ProviderResponse(status: 200))

    /// An answer with `status` and APNs' `reason`, and for a 410 the time the token was last known valid.
    public static func status(_ status: Int, _ reason: String? = nil, timestampMilliseconds: Int64? = nil) -> ProviderOutcome {
        .response(ProviderResponse(status: status, reason: reason, timestampMilliseconds: timestampMilliseconds))
    }

    /// The request's deadline passed without an answer.
    public static let timeout = ProviderOutcome.noResponse(.timeout)
}
