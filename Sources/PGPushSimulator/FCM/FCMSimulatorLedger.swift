import Foundation
import Synchronization

/// One message the FCM simulator accepted (answered 200, not `validate_only`).
public struct FCMSimulatorLedgerEntry: Sendable, Hashable {
    /// The registration token (`message.token`).
    public var token: String
    /// The `{project_id}` of the send path.
    public var projectID: String
    /// The `name` answered: `projects/{project_id}/messages/{message_id}`.
    public var name: String
    /// The request's body as sent (`{"message": …}`); empty when ``FCMSimulatorConfiguration/ledgerKeepsMessages``
    /// is off. Kept as received: serialising every accepted message again cost more than the rest of a send.
    public var body: String
    /// When the request was accepted (the simulator's clock).
    public var receivedAt: Date

    public init(token: String, projectID: String, name: String, body: String, receivedAt: Date) {
        self.token = token
        self.projectID = projectID
        self.name = name
        self.body = body
        self.receivedAt = receivedAt
    }

    /// The `message` object, parsed from the body, for assertions in tests (`nil` when it was not kept).
    public var messageObject: [String: Any]? {
        ((try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any])?["message"] as? [String: Any]
    }

    /// The `message` object as JSON with sorted keys, token included; empty when it was not kept.
    public var message: String {
        messageObject.flatMap { FCMSimulatorJSON.serialized($0) }.map { String(decoding: $0, as: UTF8.self) } ?? ""
    }
}

/// Every accepted FCM message, so tests and demos can check exactly-once delivery. Thread-safe.
public final class FCMSimulatorLedger: Sendable {
    private struct State {
        var entries: [FCMSimulatorLedgerEntry] = []
        var countsByToken: [String: Int] = [:]
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
    public var entries: [FCMSimulatorLedgerEntry] { state.withLock { $0.entries } }
    /// How many messages were accepted.
    public var acceptedCount: Int { state.withLock { $0.entries.count } }
    /// How many messages were accepted for one token.
    public func count(forToken token: String) -> Int { state.withLock { $0.countsByToken[token] ?? 0 } }
    /// Tokens accepted more than once, with how often.
    public var duplicates: [String: Int] { state.withLock { $0.countsByToken.filter { $0.value > 1 } } }

    /// Forgets every entry (the ledger file is left alone).
    public func reset() {
        state.withLock {
            $0.entries.removeAll(keepingCapacity: true)
            $0.countsByToken.removeAll(keepingCapacity: true)
        }
    }

    func record(_ entry: FCMSimulatorLedgerEntry) {
        let toWrite: [UInt8]? = state.withLock { state in
            state.entries.append(entry)
            state.countsByToken[entry.token, default: 0] += 1
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

    /// `{"token":…,"project":…,"name":…,"message":{…}|null,"receivedAtMs":…}`
    private static func jsonLine(_ entry: FCMSimulatorLedgerEntry) -> String {
        let millis = Int64(entry.receivedAt.timeIntervalSince1970 * 1000)
        var line = #"{"token":"# + FCMSimulatorJSON.quoted(entry.token)
        line += #","project":"# + FCMSimulatorJSON.quoted(entry.projectID)
        line += #","name":"# + FCMSimulatorJSON.quoted(entry.name)
        line += #","message":"# + (entry.message.isEmpty ? "null" : entry.message)
        return line + #","receivedAtMs":\#(millis)}"# + "\n"
    }
}
