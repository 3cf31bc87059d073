import Foundation
import PGPushStore

/// The job page's broadcast controls (migration 0028): its capped tokens, its throttle and estimated finish, its
/// local time and quiet hours, and the zones whose devices still wait for their moment.
extension JobPage {
    /// The facts rows (`<dt>`/`<dd>`) of the job's controls; empty for a job enqueued without any (and nothing
    /// capped).
    static func pacingFacts(_ d: DashboardJobDetail) -> HTML {
        let p = d.pacing
        var rows: [HTML] = []
        if d.job.capped > 0 || p.category != nil {
            let category: HTML = p.category.map { HTML(" <span class=\"note\">(frequency cap of category \($0); not failures)</span>") } ?? .empty
            rows.append("<dt>Capped</dt><dd id=\"job-capped\">\(Format.count(d.job.capped))\(category)</dd>")
        }
        var pace: [String] = []
        if let maxRate = p.maxRate { pace.append("max_rate \(Format.count(Int64(maxRate)))/s") }
        if let spreadOver = p.spreadOver { pace.append("spread over \(spreadOver)") }
        if let throttle = p.throttle { pace.append("throttle \(rate(throttle))/s in effect") }
        if !pace.isEmpty {
            rows.append("<dt>Throttle</dt><dd id=\"job-throttle\">\(pace.joined(separator: "; "))</dd>")
        }
        if let finish = p.estimatedFinishAt {
            rows.append("<dt>Estimated finish</dt><dd id=\"job-estimated-finish\">\(Format.time(finish))</dd>")
        }
        if let localTime = p.localTime {
            rows.append("<dt>Local time</dt><dd id=\"job-local-time\">\(localTime) <span class=\"note\">(in each device's zone, at or after send at)</span></dd>")
        }
        if let quiet = p.respectQuietHours, quiet != (d.job.priority < 10) || p.localTime != nil || !pace.isEmpty {
            // Shown when it differs from the default, or beside other controls.
            rows.append("<dt>Quiet hours</dt><dd id=\"job-quiet-hours\">\(quiet ? "respected" : "ignored")</dd>")
        }
        if p.waitingTokens > 0 || !p.waitingZones.isEmpty {
            let zones = p.waitingZones.count
            rows.append("<dt>Waiting</dt><dd id=\"job-waiting\">\(Format.count(p.waitingTokens)) tokens in \(Format.count(Int64(zones))) \(zones == 1 ? "zone" : "zones")</dd>")
        }
        return rows.joined()
    }

    /// The zones still to come, soonest first: exported like the page's other tables.
    static func waitingZones(_ d: DashboardJobDetail) -> DataTable? {
        guard !d.pacing.waitingZones.isEmpty else { return nil }
        return DataTable(
            name: "waiting-zones", columns: ["zone", "moment"],
            rows: d.pacing.waitingZones.map { z in
                [.text(z.zone), Cell(.text(Format.iso(z.moment) ?? ""), html: "\(Format.time(z.moment))")]
            })
    }

    /// `2,000`, or `12.5` for a fraction below a hundred a second (spread_over's rates are rarely whole).
    static func rate(_ value: Double) -> String {
        value >= 100 || value == value.rounded() ? Format.count(Int64(value.rounded())) : String(format: "%.1f", value)
    }
}
