import Foundation
import PGPushCore

/// How a push service's answer is read, over either HTTP version: its reason in a few words and its
/// `Retry-After`.
extension WebPushClient {
    /// What an error answer's body says, in a few words: a JSON object's `reason` (Apple), `error.message` or
    /// `message` (others), else a short line of text. Nil for anything else.
    static func reason(in body: [UInt8]) -> String? {
        guard !body.isEmpty else { return nil }
        if let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] {
            let found = object["reason"] as? String ?? (object["error"] as? [String: Any])?["message"] as? String
                ?? object["message"] as? String ?? object["error"] as? String
            return found.map(short)
        }
        guard let text = String(validating: body, as: UTF8.self) else { return nil }
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        let printable = line.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7F }
        return printable && !line.isEmpty ? short(line) : nil
    }

    /// `Retry-After` as seconds or an HTTP date (RFC 9110 §10.2.3); nil when absent or unreadable, never
    /// negative, at most an hour.
    static func retryAfter(_ value: String?, now: Date) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value), seconds >= 0 { return .seconds(min(seconds, 3600)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .seconds(Int(min(max(date.timeIntervalSince(now), 0), 3600).rounded(.up)))
    }

    private static func short(_ text: String) -> String {
        text.count <= 200 ? text : String(text.prefix(200)) + "…"
    }
}
