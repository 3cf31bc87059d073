/// Which subscription ids the simulated push service knows as gone, like ``SimulatorTokenRegistry``'s dead
/// tokens.
///
/// Explicit sets serve in-process tests; the prefix rules let a separate process (`pgpush simulator`) and the
/// sender agree on outcomes without sharing state: an id (the last path segment of an endpoint) starting with
/// ``goneIDPrefix`` is `410 Gone` and one starting with ``notFoundIDPrefix`` is `404 Not Found`, whether or not
/// the simulator made it. Subscriptions the simulator makes gone carry the prefix and are in the set. Sets win
/// over prefixes; ids are compared exactly.
public struct WebPushSimulatorRegistry: Sendable, Hashable {
    /// Ids answered `410 {"reason":"Gone"}`: the subscription expired or the user unsubscribed.
    public var gone: Set<String> = []
    /// Ids answered `404 {"reason":"NotFound"}`.
    public var notFound: Set<String> = []
    /// Ids starting with this are gone (410). Default `gone`.
    public var goneIDPrefix: String? = "gone"
    /// Ids starting with this are not found (404). Default `notfound`.
    public var notFoundIDPrefix: String? = "notfound"

    /// An empty registry with the default prefix rules.
    public init() {}

    /// What the registry says about a subscription id.
    public enum Outcome: Sendable, Hashable {
        /// Not listed as gone: a subscription the simulator made is served, any other id is 404.
        case live
        /// 404.
        case notFound
        /// 410.
        case gone

        /// The HTTP status of a push to such a subscription; `nil` for a live one.
        public var status: Int? {
            switch self {
            case .live: nil
            case .notFound: 404
            case .gone: 410
            }
        }
    }

    /// Looks an id up.
    public func outcome(forID id: String) -> Outcome {
        if gone.contains(id) { return .gone }
        if notFound.contains(id) { return .notFound }
        if let prefix = goneIDPrefix, !prefix.isEmpty, id.hasPrefix(prefix) { return .gone }
        if let prefix = notFoundIDPrefix, !prefix.isEmpty, id.hasPrefix(prefix) { return .notFound }
        return .live
    }

    /// Lists `id` with `outcome` (removing it from the other set); `.live` removes it from both.
    public mutating func mark(_ id: String, _ outcome: Outcome) {
        gone.remove(id)
        notFound.remove(id)
        switch outcome {
        case .live: break
        case .gone: gone.insert(id)
        case .notFound: notFound.insert(id)
        }
    }

    /// The prefix of an id the simulator makes with `outcome`, so that a sender in another process sees it in
    /// the endpoint; empty for a live one.
    func idPrefix(for outcome: Outcome) -> String {
        switch outcome {
        case .live: ""
        case .gone: goneIDPrefix.map { $0 + "-" } ?? ""
        case .notFound: notFoundIDPrefix.map { $0 + "-" } ?? ""
        }
    }
}
