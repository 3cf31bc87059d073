import Crypto
import Foundation
import PGPushCore
import Synchronization

/// The HTTP version a request arrived over.
public enum WebPushHTTPVersion: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case http1_1 = "HTTP/1.1"
    case http2 = "HTTP/2"
    public var description: String { rawValue }
}

/// One message the Web Push simulator accepted (answered 201) and decrypted.
public struct WebPushSimulatorLedgerEntry: Sendable, Hashable {
    /// The subscription's id (the last path segment of its endpoint).
    public var subscriptionID: String
    /// The message's URL, as answered in `Location`.
    public var location: String
    /// The decrypted plaintext when ``WebPushSimulatorConfiguration/ledgerKeepsPayloads`` is on; `nil` otherwise.
    public var plaintext: [UInt8]?
    /// SHA-256 of the decrypted plaintext, lowercase hex (always kept).
    public var plaintextSHA256: String
    /// How many bytes the plaintext had.
    public var plaintextLength: Int
    /// The `TTL` header as sent.
    public var ttl: Int
    /// The `Urgency` header; `nil` when absent (a push service takes that as `normal`).
    public var urgency: WebPushUrgency?
    /// The `Topic` header, if any.
    public var topic: String?
    /// The HTTP version the message arrived over.
    public var httpVersion: WebPushHTTPVersion
    /// The VAPID public key (`k=`) that signed the request.
    public var applicationServerKey: String
    /// The VAPID token's `sub`.
    public var subject: String?
    /// When the message was accepted (the simulator's clock).
    public var receivedAt: Date

    /// The plaintext as UTF-8 text, when kept.
    public var plaintextString: String? { plaintext.map { String(decoding: $0, as: UTF8.self) } }
}

/// Every accepted Web Push message, so tests and demos can check exactly-once delivery. Thread-safe.
public final class WebPushSimulatorLedger: Sendable {
    private struct MessageKey: Hashable {
        var subscriptionID: String
        var plaintextSHA256: String
    }

    private struct State {
        var entries: [WebPushSimulatorLedgerEntry] = []
        var countsBySubscription: [String: Int] = [:]
        var countsByMessage: [MessageKey: Int] = [:]
        var countsByVersion: [WebPushHTTPVersion: Int] = [:]
        var pendingLines: [UInt8] = []
    }

    private let state = Mutex(State())
    private let file: FileHandle?
    private static let flushThreshold = 64 * 1024

    init(ledgerFile: String?) {
        if let ledgerFile {
            if !FileManager.default.fileExists(atPath: ledgerFile) {
                _ = FileManager.default.createFile(atPath: ledgerFile, contents: nil)
            }
            let handle = FileHandle(forWritingAtPath: ledgerFile)
            _ = try? handle?.seekToEnd()
            self.file = handle
        } else {
            self.file = nil
        }
    }

    /// Every entry, in the order accepted.
    public var entries: [WebPushSimulatorLedgerEntry] { state.withLock { $0.entries } }
    /// How many messages were accepted.
    public var acceptedCount: Int { state.withLock { $0.entries.count } }
    /// How many messages were accepted over one HTTP version.
    public func acceptedCount(over version: WebPushHTTPVersion) -> Int { state.withLock { $0.countsByVersion[version] ?? 0 } }
    /// How many messages were accepted for one subscription.
    public func count(forSubscription id: String) -> Int { state.withLock { $0.countsBySubscription[id] ?? 0 } }
    /// The plaintexts accepted for one subscription, in order, as UTF-8 text (empty unless payloads are kept).
    public func plaintexts(forSubscription id: String) -> [String] {
        state.withLock { $0.entries.filter { $0.subscriptionID == id }.compactMap(\.plaintextString) }
    }
    /// Subscriptions that accepted more than one message, with how many.
    public var duplicates: [String: Int] { state.withLock { $0.countsBySubscription.filter { $0.value > 1 } } }
    /// Messages accepted again: the same plaintext for the same subscription more than once (a resend of one
    /// job's message, where distinct jobs' messages to one subscription are not). Counts the repeats.
    public var duplicateMessages: Int {
        state.withLock { $0.countsByMessage.values.reduce(0) { $0 + max(0, $1 - 1) } }
    }

    /// Forgets every entry (the ledger file is left alone).
    public func reset() {
        state.withLock {
            $0.entries.removeAll(keepingCapacity: true)
            $0.countsBySubscription.removeAll(keepingCapacity: true)
            $0.countsByMessage.removeAll(keepingCapacity: true)
            $0.countsByVersion.removeAll(keepingCapacity: true)
        }
    }

    func record(_ entry: WebPushSimulatorLedgerEntry) {
        let toWrite: [UInt8]? = state.withLock { state in
            state.entries.append(entry)
            state.countsBySubscription[entry.subscriptionID, default: 0] += 1
            state.countsByMessage[MessageKey(subscriptionID: entry.subscriptionID, plaintextSHA256: entry.plaintextSHA256), default: 0] += 1
            state.countsByVersion[entry.httpVersion, default: 0] += 1
            guard file != nil else { return nil }
            state.pendingLines.append(contentsOf: Self.jsonLine(entry).utf8)
            guard state.pendingLines.count >= Self.flushThreshold else { return nil }
            defer { state.pendingLines.removeAll(keepingCapacity: true) }
            return state.pendingLines
        }
        if let toWrite { try? file?.write(contentsOf: Data(toWrite)) }
    }

    /// Writes buffered ledger lines to the ledger file.
    func flush() {
        let toWrite: [UInt8] = state.withLock { state in
            defer { state.pendingLines.removeAll(keepingCapacity: true) }
            return state.pendingLines
        }
        if !toWrite.isEmpty { try? file?.write(contentsOf: Data(toWrite)) }
        try? file?.synchronize()
    }

    /// `{"subscription":…,"location":…,"ttl":…,"urgency":…|null,"topic":…|null,"http":"HTTP/2",
    /// "plaintextSHA256":…,"plaintextLength":…,"receivedAtMs":…[,"plaintext":…]}`
    private static func jsonLine(_ entry: WebPushSimulatorLedgerEntry) -> String {
        let millis = Int64(entry.receivedAt.timeIntervalSince1970 * 1000)
        var line = #"{"subscription":"# + FCMSimulatorJSON.quoted(entry.subscriptionID)
        line += #","location":"# + FCMSimulatorJSON.quoted(entry.location)
        line += #","ttl":\#(entry.ttl),"urgency":"# + (entry.urgency.map { "\"\($0.rawValue)\"" } ?? "null")
        line += #","topic":"# + (entry.topic.map(FCMSimulatorJSON.quoted) ?? "null")
        line += #","http":""# + entry.httpVersion.rawValue + #"","plaintextSHA256":""# + entry.plaintextSHA256
        line += #"","plaintextLength":\#(entry.plaintextLength),"receivedAtMs":\#(millis)"#
        if let text = entry.plaintextString { line += #","plaintext":"# + FCMSimulatorJSON.quoted(text) }
        return line + "}\n"
    }

    static func sha256Hex(_ bytes: [UInt8]) -> String {
        SimulatorLedger.hex(SHA256.hash(data: bytes))
    }
}
