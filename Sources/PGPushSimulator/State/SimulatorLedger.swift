import Crypto
import Foundation
import PGPushCore
import Synchronization

/// One notification the simulator accepted (answered 200).
public struct SimulatorLedgerEntry: Sendable, Hashable, Codable {
    /// The device token, lowercase hex.
    public var token: String
    /// The `apns-id` of the response.
    public var apnsID: String
    /// The `apns-topic` header, if any.
    public var topic: String?
    /// SHA-256 of the payload bytes, lowercase hex.
    public var payloadSHA256: String
    /// When the request was accepted (the simulator's clock).
    public var receivedAt: Date
    /// The `apns-push-type` header, if any (`liveactivity`, `alert`, …). Optional, so ledger files written
    /// before it existed still decode.
    public var pushType: String?
    /// The `apns-priority` header, if any (absent means APNs' default, 10 for most push types).
    public var priority: Int?
    /// The payload exactly as received, as UTF-8 text, when ``APNsSimulatorConfiguration/ledgerKeepsPayloads``
    /// is on; `nil` otherwise. Optional, so ledger files written before it existed (or without it) still decode.
    public var payload: String?
}

/// Every accepted notification, so tests and demos can check exactly-once delivery. Thread-safe.
///
/// Entries are stored compactly (binary apns-id and digest, about 170 bytes each) and converted to
/// ``SimulatorLedgerEntry`` when read; `apnsID` reads back in lowercase canonical form. Payloads, when
/// ``APNsSimulatorConfiguration/ledgerKeepsPayloads`` asks for them, are kept beside the entries rather than
/// in them, so a ledger without them costs not a byte more per entry.
public final class SimulatorLedger: Sendable {
    struct StoredEntry: Sendable {
        var token: String
        var apnsID: UUID
        var topic: String?
        var payloadSHA256: SHA256Digest?
        var receivedAt: Date
        var pushType: PushType? = nil
        /// 10, 5 or 1 when sent; one byte rather than eight, the ledger holds millions in benchmarks.
        var priority: UInt8? = nil

        func publicEntry(payload: String? = nil) -> SimulatorLedgerEntry {
            SimulatorLedgerEntry(token: token, apnsID: apnsID.apnsIDString, topic: topic,
                                 payloadSHA256: payloadSHA256.map(SimulatorLedger.hex) ?? "", receivedAt: receivedAt,
                                 pushType: pushType?.rawValue, priority: priority.map(Int.init), payload: payload)
        }
    }

    private struct State {
        var entries: [StoredEntry] = []
        var countsByToken: [String: Int] = [:]
        /// One per entry, in step with ``entries``, when the ledger keeps payloads; always empty otherwise.
        var payloads: [String?] = []
        var pendingLines: [UInt8] = []
    }

    private let state: Mutex<State>
    private let file: FileHandle?
    /// Whether ``record(_:payload:)`` keeps the payloads it is given.
    let keepsPayloads: Bool
    private static let flushThreshold = 64 * 1024

    init(ledgerFile: String?, keepsPayloads: Bool = false) {
        self.keepsPayloads = keepsPayloads
        var initial = State()
        initial.entries.reserveCapacity(1 << 16)
        initial.countsByToken.reserveCapacity(1 << 16)
        self.state = Mutex(initial)
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
    public var entries: [SimulatorLedgerEntry] {
        let (stored, payloads) = state.withLock { ($0.entries, $0.payloads) }
        guard keepsPayloads else { return stored.map { $0.publicEntry() } }
        return zip(stored, payloads).map { $0.publicEntry(payload: $1) }
    }
    /// How many notifications were accepted.
    public var acceptedCount: Int { state.withLock { $0.entries.count } }
    /// How many notifications were accepted for one token.
    public func count(forToken token: String) -> Int { state.withLock { $0.countsByToken[token.lowercased()] ?? 0 } }
    /// Tokens accepted more than once, with how often.
    public var duplicates: [String: Int] { state.withLock { $0.countsByToken.filter { $0.value > 1 } } }

    /// Forgets every entry (the ledger file is left alone).
    public func reset() {
        state.withLock {
            $0.entries.removeAll(keepingCapacity: true)
            $0.countsByToken.removeAll(keepingCapacity: true)
            $0.payloads.removeAll(keepingCapacity: true)
        }
    }

    /// Records an accepted notification; `payload` is kept only when the ledger keeps payloads.
    func record(_ entry: StoredEntry, payload: String? = nil) {
        let payload = keepsPayloads ? payload : nil
        let toWrite: [UInt8]? = state.withLock { state in
            state.entries.append(entry)
            state.countsByToken[entry.token, default: 0] += 1
            if keepsPayloads { state.payloads.append(payload) }
            guard file != nil else { return nil }
            state.pendingLines.append(contentsOf: Self.jsonLine(entry.publicEntry(payload: payload)).utf8)
            guard state.pendingLines.count >= Self.flushThreshold else { return nil }
            defer { state.pendingLines.removeAll(keepingCapacity: true) }
            return state.pendingLines
        }
        if let toWrite { writeToFile(toWrite) }
    }

    /// Writes buffered ledger lines to the ledger file.
    func flush() {
        let toWrite: [UInt8] = state.withLock { state in
            defer { state.pendingLines.removeAll(keepingCapacity: true) }
            return state.pendingLines
        }
        if !toWrite.isEmpty { writeToFile(toWrite) }
        try? file?.synchronize()
    }

    private func writeToFile(_ bytes: [UInt8]) {
        // Writes from different threads may interleave whole batches; each batch holds complete lines.
        try? file?.write(contentsOf: Data(bytes))
    }

    private static func jsonLine(_ entry: SimulatorLedgerEntry) -> String {
        let topic = entry.topic.map { "\"\(escape($0))\"" } ?? "null"
        let millis = Int64(entry.receivedAt.timeIntervalSince1970 * 1000)
        let pushType = entry.pushType.map { "\"\(escape($0))\"" } ?? "null"
        let priority = entry.priority.map(String.init) ?? "null"
        // Lines without a payload are unchanged from before payloads could be kept.
        let payload = entry.payload.map { #","payload":"# + FCMSimulatorJSON.quoted($0) } ?? ""
        return #"{"token":"\#(entry.token)","apnsID":"\#(escape(entry.apnsID))","topic":\#(topic),"payloadSHA256":"\#(entry.payloadSHA256)","receivedAtMs":\#(millis),"pushType":\#(pushType),"priority":\#(priority)\#(payload)}"#
            + "\n"
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    static func hex(_ digest: SHA256Digest) -> String {
        var hex = [UInt8]()
        hex.reserveCapacity(64)
        for byte in digest {
            hex.append(hexDigits[Int(byte >> 4)])
            hex.append(hexDigits[Int(byte & 0xF)])
        }
        return String(decoding: hex, as: UTF8.self)
    }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
    }
}
