import Foundation
import PGPushStore

/// One observation of a job's progress, as `push.job_progress` reports it.
public struct JobSnapshot: Equatable, Sendable {
    public var jobID: Int64
    public var appID: String
    public var state: String
    public var total: Int64?
    public var delivered: Int64
    public var failed: Int64
    public var pruned: Int64
    public var pending: Int64
    public var expired: Int64
    /// Delivered per platform ("ios", "android", "web"), when asked for (`byPlatform`, or a job to several
    /// platforms in `init(watching:)`).
    public var deliveredByPlatform: [String: Int64]? = nil
    /// Tokens not sent because their person reached the category's frequency cap: outcomes, not failures.
    public var capped: Int64 = 0
    /// A throttled job's rate in effect (notifications per second), once expanded.
    public var throttle: Double? = nil
    /// When a paced job's last chunk comes due.
    public var estimatedFinishAt: Date? = nil
    /// Tokens waiting for their zone's moment (local time, quiet hours), and the zones to come, soonest first.
    public var waitingTokens: Int64 = 0
    public var waitingZones: [ZoneMoment] = []

    /// Final outcomes so far (delivered, failed or capped); `pruned` is a consequence of failures, not an extra
    /// outcome.
    public var processed: Int64 { delivered + failed + capped }

    public var isFinished: Bool { ["done", "failed", "cancelled"].contains(state) }

    public var json: [String: Any] {
        var object: [String: Any] = [
            "job_id": jobID, "app_id": appID, "state": state, "total": jsonValue(total),
            "delivered": delivered, "failed": failed, "pruned": pruned, "pending": pending, "expired": expired,
            "capped": capped, "throttle": jsonValue(throttle), "estimated_finish_at": jsonValue(estimatedFinishAt.map(Self.time)),
            "waiting_tokens": waitingTokens,
            "waiting_zones": waitingZones.map { ["zone": $0.zone, "moment": Self.time($0.moment)] },
        ]
        if let deliveredByPlatform {
            for (key, _) in PlatformSplit.platforms {
                let count: Int64 = deliveredByPlatform[key] ?? 0
                object["\(key)_delivered"] = count
            }
        }
        return object
    }

    /// `2026-11-29T08:00:00Z`: UTC, second precision, as the other commands print times.
    static func time(_ date: Date) -> String {
        ISO8601DateFormatter.string(from: date, timeZone: .gmt, formatOptions: [.withInternetDateTime])
    }
}

extension JobSnapshot {
    /// The store's row of `push.job_progress`; with `byPlatform`, the delivered counts per platform too, for the
    /// platforms the job reaches (once expanded) or has delivered to.
    public init(_ progress: JobProgress, byPlatform: Bool = false) {
        self.init(
            jobID: progress.jobID, appID: progress.appID, state: progress.state, total: progress.total,
            delivered: progress.delivered, failed: progress.failed, pruned: progress.pruned, pending: progress.pending,
            expired: progress.expired)
        capped = progress.capped
        throttle = progress.throttle
        estimatedFinishAt = progress.estimatedFinishAt
        waitingTokens = progress.waitingTokens
        waitingZones = progress.waitingZones
        guard byPlatform else { return }
        deliveredByPlatform = PlatformSplit(progress).delivered
    }

    /// The snapshot `pgpush watch` shows: the per-platform split only for a job whose audience spans more than one
    /// platform (a single platform's delivered count says it all).
    public init(watching progress: JobProgress) {
        self.init(progress, byPlatform: PlatformSplit(progress).isMixed)
    }
}

/// Turns successive snapshots into a send rate and renders the one-line progress display.
///
/// Pure: the caller passes the elapsed time, so the rate and ETA are testable without a clock.
public struct ProgressLine {
    /// Width of the bar in characters.
    public var barWidth: Int
    /// The rate is measured over this many trailing seconds: long enough to smooth over polls that see no
    /// change (workers write back in batches), short enough to follow a slowdown.
    public var window: Double
    public private(set) var rate: Double?
    private var samples: [(processed: Int64, seconds: Double)] = []

    public init(barWidth: Int = 24, window: Double = 10) {
        self.barWidth = barWidth
        self.window = window
    }

    /// Feeds one observation taken `seconds` after watching began.
    public mutating func observe(_ snapshot: JobSnapshot, atSeconds seconds: Double) {
        samples.append((snapshot.processed, seconds))
        // Keep the newest sample at or before the window's start as the baseline.
        while samples.count > 2, samples[1].seconds <= seconds - window {
            samples.removeFirst()
        }
        guard let first = samples.first, seconds > first.seconds else { return }
        rate = Double(max(snapshot.processed - first.processed, 0)) / (seconds - first.seconds)
    }

    /// Seconds until `pending` reaches zero at the current rate, if there is a rate to go by.
    public func eta(for snapshot: JobSnapshot) -> Double? {
        guard let rate, rate > 0, snapshot.pending > 0 else { return nil }
        return Double(snapshot.pending) / rate
    }

    public func render(_ snapshot: JobSnapshot) -> String {
        let total = snapshot.total ?? 0
        let fraction = total > 0 ? min(Double(snapshot.processed) / Double(total), 1) : (snapshot.isFinished ? 1 : 0)
        let filled = Int((fraction * Double(barWidth)).rounded(.down))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled)
        var line = "job \(snapshot.jobID) \(snapshot.state.padding(toLength: 9, withPad: " ", startingAt: 0))"
        line += " [\(bar)] \(String(format: "%3d", Int(fraction * 100)))%"
        line += "  delivered \(snapshot.delivered)"
        line += Self.split(snapshot)
        line += "  failed \(snapshot.failed)  pruned \(snapshot.pruned)"
        if snapshot.capped > 0 { line += "  capped \(snapshot.capped)" }
        line += "  pending \(snapshot.pending)"
        line += "  \(rate.map { String(format: "%.1f", $0) } ?? "-")/s"
        if let throttle = snapshot.throttle { line += "  throttle \(Self.rate(throttle))/s" }
        line += "  ETA \(eta(for: snapshot).map(Self.duration) ?? "-")"
        if let finish = snapshot.estimatedFinishAt { line += "  finish ~\(Self.minute(finish))" }
        line += Self.waiting(snapshot)
        return line
    }

    /// How many zones ``waiting(_:)`` names before `+N more`.
    public static let zonesShown = 3

    /// `  waiting 120 in 2 zones: Asia/Tokyo 2026-11-29 00:00Z, Europe/Paris 2026-11-29 08:00Z`, soonest first
    /// (the first ``zonesShown``); empty when nothing waits for a zone's moment.
    public static func waiting(_ snapshot: JobSnapshot) -> String {
        guard snapshot.waitingTokens > 0 || !snapshot.waitingZones.isEmpty else { return "" }
        let zones = snapshot.waitingZones
        var text = "  waiting \(snapshot.waitingTokens) in \(zones.count) \(zones.count == 1 ? "zone" : "zones")"
        guard !zones.isEmpty else { return text }
        text += ": " + zones.prefix(zonesShown).map { "\($0.zone) \(minute($0.moment))" }.joined(separator: ", ")
        if zones.count > zonesShown { text += ", +\(zones.count - zonesShown) more" }
        return text
    }

    /// `2026-11-29 08:00Z`: a moment to the minute, UTC.
    public static func minute(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .gmt
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        return String(format: "%04d-%02d-%02d %02d:%02dZ", c.year ?? 0, c.month ?? 0, c.day ?? 0, c.hour ?? 0, c.minute ?? 0)
    }

    /// A throttle as a number: `2000`, or `12.5` for a fraction below a hundred a second (spread_over's rates are
    /// rarely whole).
    static func rate(_ value: Double) -> String {
        value >= 100 || value == value.rounded() ? String(Int(value.rounded())) : String(format: "%.1f", value)
    }

    /// ` (iOS 3, Android 1, Web 2)`: delivered per platform, when the snapshot has the split; else empty.
    static func split(_ snapshot: JobSnapshot) -> String {
        guard let delivered = snapshot.deliveredByPlatform else { return "" }
        let parts = PlatformSplit.platforms.compactMap { platform in delivered[platform.key].map { "\(platform.name) \($0)" } }
        return parts.isEmpty ? "" : " (\(parts.joined(separator: ", ")))"
    }

    /// The closing line once the job has ended.
    public static func summary(_ snapshot: JobSnapshot) -> String {
        "job \(snapshot.jobID) \(snapshot.state): \(snapshot.delivered) delivered\(split(snapshot)), \(snapshot.failed) failed, "
            + (snapshot.capped > 0 ? "\(snapshot.capped) capped, " : "")
            + "\(snapshot.pruned) pruned, \(snapshot.pending) pending (total \(snapshot.total.map { String($0) } ?? "-"))"
    }

    public static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded(.up))
        if whole < 60 { return "\(whole)s" }
        if whole < 3600 { return "\(whole / 60)m\(String(format: "%02d", whole % 60))s" }
        return "\(whole / 3600)h\(String(format: "%02d", whole / 60 % 60))m"
    }
}
