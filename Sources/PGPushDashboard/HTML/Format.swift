import Foundation

/// How values look on the pages and in the exports: UTC times, grouped numbers, short device tokens.
enum Format {
    /// `2026-11-25 19:42:33Z`.
    static func time(_ date: Date?) -> String {
        guard let date else { return "" }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .gmt
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return String(
            format: "%04d-%02d-%02d %02d:%02d:%02dZ", c.year ?? 0, c.month ?? 0, c.day ?? 0, c.hour ?? 0, c.minute ?? 0,
            c.second ?? 0)
    }

    /// The same instant for machines (JSON, CSV): ISO 8601.
    static func iso(_ date: Date?) -> String? {
        guard let date else { return nil }
        return ISO8601DateFormatter.string(from: date, timeZone: .gmt, formatOptions: [.withInternetDateTime])
    }

    /// 1500 → `1,500`.
    static func count(_ n: Int64) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (i, ch) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(ch)
        }
        return n < 0 ? "-" + out : out
    }

    static func count(_ n: Int64?) -> String { n.map { count($0) } ?? "—" }

    /// Seconds as `850 ms`, `12.3 s`, `4 min 10 s`, `2 h 5 min`.
    static func duration(_ seconds: Double?) -> String {
        guard let seconds, seconds.isFinite else { return "—" }
        if seconds < 1 { return "\(Int((seconds * 1000).rounded())) ms" }
        if seconds < 60 { return String(format: "%.1f s", seconds) }
        if seconds < 3600 { return "\(Int(seconds) / 60) min \(Int(seconds) % 60) s" }
        return "\(Int(seconds) / 3600) h \(Int(seconds) % 3600 / 60) min"
    }

    /// A share as `97.5 %`, or `—` when there is nothing to divide.
    static func percent(_ part: Int64, of whole: Int64) -> String {
        guard whole > 0 else { return "—" }
        return String(format: "%.1f %%", 100 * Double(part) / Double(whole))
    }

    /// A device token is never shown whole: its first 8 and last 4 characters.
    static func token(_ token: String) -> String {
        guard token.count > 14 else { return String(token.prefix(4)) + "…" }
        return "\(token.prefix(8))…\(token.suffix(4))"
    }
}
