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
    /// Delivered per platform ("ios", "android"), when the job reaches both.
    public var deliveredByPlatform: [String: Int64]? = nil

    /// Final outcomes so far (delivered or failed); `pruned` is a consequence of failures, not an extra outcome.
    public var processed: Int64 { delivered + failed }

    public var isFinished: Bool { ["done", "failed", "cancelled"].contains(state) }

    public var json: [String: Any] {
        [
            "job_id": jobID, "app_id": appID, "state": state, "total": jsonValue(total),
            "delivered": delivered, "failed": failed, "pruned": pruned, "pending": pending, "expired": expired,
        ]
    }
}

extension JobSnapshot {
    /// The store's row of `push.job_progress`; with `byPlatform`, the delivered counts per platform too (only
    /// the platforms that delivered something).
    public init(_ progress: JobProgress, byPlatform: Bool = false) {
        self.init(
            jobID: progress.jobID, appID: progress.appID, state: progress.state, total: progress.total,
            delivered: progress.delivered, failed: progress.failed, pruned: progress.pruned, pending: progress.pending,
            expired: progress.expired)
        guard byPlatform else { return }
        var split: [String: Int64] = [:]
        if let ios = progress.iosDelivered, ios > 0 { split["ios"] = ios }
        if let android = progress.androidDelivered, android > 0 { split["android"] = android }
        deliveredByPlatform = split
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
        if let split = snapshot.deliveredByPlatform {
            line += " (iOS \(split["ios"] ?? 0), Android \(split["android"] ?? 0))"
        }
        line += "  failed \(snapshot.failed)  pruned \(snapshot.pruned)"
        line += "  pending \(snapshot.pending)"
        line += "  \(rate.map { String(format: "%.1f", $0) } ?? "-")/s"
        line += "  ETA \(eta(for: snapshot).map(Self.duration) ?? "-")"
        return line
    }

    /// The closing line once the job has ended.
    public static func summary(_ snapshot: JobSnapshot) -> String {
        "job \(snapshot.jobID) \(snapshot.state): \(snapshot.delivered) delivered, \(snapshot.failed) failed, "
            + "\(snapshot.pruned) pruned, \(snapshot.pending) pending (total \(snapshot.total.map { String($0) } ?? "-"))"
    }

    public static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded(.up))
        if whole < 60 { return "\(whole)s" }
        if whole < 3600 { return "\(whole / 60)m\(String(format: "%02d", whole % 60))s" }
        return "\(whole / 3600)h\(String(format: "%02d", whole / 60 % 60))m"
    }
}
