import Foundation

/// One observation of a job's progress, as `push.job_progress` reports it.
struct JobSnapshot: Equatable, Sendable {
    var jobID: Int64
    var appID: String
    var state: String
    var total: Int64?
    var delivered: Int64
    var failed: Int64
    var pruned: Int64
    var pending: Int64
    var expired: Int64

    /// Final outcomes so far (delivered or failed); `pruned` is a consequence of failures, not an extra outcome.
    var processed: Int64 { delivered + failed }

    var isFinished: Bool { ["done", "failed", "cancelled"].contains(state) }

    var json: [String: Any] {
        [
            "job_id": jobID, "app_id": appID, "state": state, "total": jsonValue(total),
            "delivered": delivered, "failed": failed, "pruned": pruned, "pending": pending, "expired": expired,
        ]
    }
}

/// Turns successive snapshots into a send rate and renders the one-line progress display.
///
/// Pure: the caller passes the elapsed time, so the rate and ETA are testable without a clock.
struct ProgressLine {
    /// Width of the bar in characters.
    var barWidth: Int
    /// Weight of the newest rate sample; the rest is the previous smoothed rate.
    var smoothing: Double
    private(set) var rate: Double?
    private var last: (processed: Int64, seconds: Double)?

    init(barWidth: Int = 24, smoothing: Double = 0.5) {
        self.barWidth = barWidth
        self.smoothing = smoothing
    }

    /// Feeds one observation taken `seconds` after watching began.
    mutating func observe(_ snapshot: JobSnapshot, atSeconds seconds: Double) {
        defer { last = (snapshot.processed, seconds) }
        guard let last, seconds > last.seconds else { return }
        let sample = Double(max(snapshot.processed - last.processed, 0)) / (seconds - last.seconds)
        rate = rate.map { smoothing * sample + (1 - smoothing) * $0 } ?? sample
    }

    /// Seconds until `pending` reaches zero at the current rate, if there is a rate to go by.
    func eta(for snapshot: JobSnapshot) -> Double? {
        guard let rate, rate > 0, snapshot.pending > 0 else { return nil }
        return Double(snapshot.pending) / rate
    }

    func render(_ snapshot: JobSnapshot) -> String {
        let total = snapshot.total ?? 0
        let fraction = total > 0 ? min(Double(snapshot.processed) / Double(total), 1) : (snapshot.isFinished ? 1 : 0)
        let filled = Int((fraction * Double(barWidth)).rounded(.down))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled)
        var line = "job \(snapshot.jobID) \(snapshot.state.padding(toLength: 9, withPad: " ", startingAt: 0))"
        line += " [\(bar)] \(String(format: "%3d", Int(fraction * 100)))%"
        line += "  delivered \(snapshot.delivered)  failed \(snapshot.failed)  pruned \(snapshot.pruned)"
        line += "  pending \(snapshot.pending)"
        line += "  \(rate.map { String(format: "%.1f", $0) } ?? "-")/s"
        line += "  ETA \(eta(for: snapshot).map(Self.duration) ?? "-")"
        return line
    }

    /// The closing line once the job has ended.
    static func summary(_ snapshot: JobSnapshot) -> String {
        "job \(snapshot.jobID) \(snapshot.state): \(snapshot.delivered) delivered, \(snapshot.failed) failed, "
            + "\(snapshot.pruned) pruned, \(snapshot.pending) pending (total \(snapshot.total.map { String($0) } ?? "-"))"
    }

    static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded(.up))
        if whole < 60 { return "\(whole)s" }
        if whole < 3600 { return "\(whole / 60)m\(String(format: "%02d", whole % 60))s" }
        return "\(whole / 3600)h\(String(format: "%02d", whole / 60 % 60))m"
    }
}
