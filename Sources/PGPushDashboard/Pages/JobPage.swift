import Foundation
import PGPushStore

/// `/jobs/<id>`: the timeline, per-platform counts (opens and the open rate too, once an app reports opens), the
/// outcome reasons, the payload (collapsed).
enum JobPage {
    static func render(_ d: DashboardJobDetail, _ context: PageContext) -> Page {
        let job = d.job
        let active = job.state == "queued" || job.state == "running"
        let timeline: HTML = """
            <dl class="facts" id="timeline">
            <dt>App</dt><dd><a href="\(context.link("/apps/" + FormData.percentEncode(job.appID)))">\(job.appID)</a></dd>
            <dt>State</dt><dd id="job-state">\(job.state)\(d.failureReason.map { HTML(" <span class=\"bad\">(\($0))</span>") } ?? .empty)</dd>
            <dt>Push type / priority</dt><dd>\(d.pushType) / \(job.priority)</dd>
            <dt>Created</dt><dd>\(Format.time(job.createdAt))</dd>
            <dt>Send at</dt><dd>\(Format.time(d.sendAt))</dd>
            <dt>Started</dt><dd>\(Format.time(d.startedAt))</dd>
            <dt>First send</dt><dd>\(Format.time(d.firstSentAt))\(d.firstSentAt.map { HTML(" <span class=\"note\">(\(Format.duration($0.timeIntervalSince(max(job.createdAt, d.sendAt)))) after enqueue)</span>") } ?? .empty)</dd>
            <dt>Finished</dt><dd>\(Format.time(job.finishedAt))</dd>
            <dt>Expires</dt><dd>\(Format.time(d.expiresAt))</dd>
            \(pacingFacts(d))
            \(job.idempotencyKey.map { HTML("<dt>Idempotency key</dt><dd>\($0)</dd>") } ?? .empty)
            \(job.labels.isEmpty ? HTML.empty : HTML("<dt>Labels</dt><dd id=\"job-labels\">\(JobsPage.badges(job.labels, context))</dd>"))
            \(d.channel.map { HTML("<dt>Channel</dt><dd>\($0)</dd>") } ?? .empty)
            \(d.replacedBy.map { HTML("<dt>Replaced by</dt><dd id=\"replaced-by\">\(jobLink($0, context))</dd>") } ?? .empty)
            \(d.resentFrom.map { HTML("<dt>Resends the failures of</dt><dd id=\"resent-from\">\(jobLink($0, context))</dd>") } ?? .empty)
            \(d.resends.isEmpty ? HTML.empty : HTML("<dt>Failures resent as</dt><dd id=\"resends\">\(d.resends.map { jobLink($0, context) + " " })</dd>"))
            </dl>
            <p>\(Charts.progress(job))</p>
            """
        var platforms = DataTable(
            name: "platforms", columns: ["platform", "total", "delivered", "failed", "pruned"],
            rows: [
                [.text("ios"), .integer(job.iosTotal), .integer(job.iosDelivered), .integer(job.iosFailed), .integer(d.prunedByPlatform["ios"] ?? 0)],
                [.text("android"), .integer(job.androidTotal ?? (job.total == nil ? nil : 0)), .integer(job.androidDelivered), .integer(job.androidFailed), .integer(d.prunedByPlatform["android"] ?? 0)],
                [.text("web"), .integer(job.webTotal ?? (job.total == nil ? nil : 0)), .integer(job.webDelivered), .integer(job.webFailed), .integer(d.prunedByPlatform["web"] ?? 0)],
            ], numeric: [1, 2, 3, 4])
        // Opens beside the deliveries, once an app has reported one: before that (and for apps that report
        // none) a column of zeros would read as "nobody opened it".
        if d.opened > 0 {
            platforms.columns += ["opened", "open rate"]
            platforms.numeric.formUnion([5, 6])
            for (i, platform) in Platforms.all.enumerated() {
                let e = d.engagement[platform]
                platforms.rows[i] += [.integer(e?.opened ?? 0), openRate(e?.openRate)]
            }
        }
        let reasons = DataTable(
            name: "reasons", columns: ["platform", "status", "reason", "count", "hint"],
            rows: d.reasons.map { r in
                [.text(r.platform), .integer(Int64(r.status)), AppPage.reasonCell(r.reason, context), .integer(r.count), .text(Remediation.hint(for: r.reason))]
            }, numeric: [1, 3])
        var actions: HTML = .empty
        if context.allowActions, active {
            actions = "<form class=\"action\" method=\"post\" action=\"\(context.link("/jobs/\(job.id)/cancel"))\"><button type=\"submit\">Cancel job</button></form>"
        }
        if context.allowActions, canResend(d) {
            actions = actions + "<form class=\"action\" method=\"post\" action=\"\(context.link("/jobs/\(job.id)/resend"))\"><button type=\"submit\" id=\"resend\">Resend to failed tokens</button></form>"
        }
        if context.query["resend"] == "none" {
            actions = actions + "<p id=\"resend-notice\" class=\"note\">Nothing was resent: no failed token of this job qualifies (each was delivered since, pruned, is no longer a device of the app, is already in a resend, or failed for a reason a resend would not fix).</p>"
        }
        let zones = waitingZones(d)
        let waiting: HTML = zones.map { HTML("<h2>Zones still to come</h2>\(Layout.table($0, context))") } ?? .empty
        let body: HTML = """
            \(timeline)
            \(actions)
            \(waiting)
            <h2>By platform</h2>
            \(Layout.table(platforms, context))
            <h2>Outcomes by reason</h2>
            \(Layout.table(reasons, context, empty: "No outcome recorded yet."))
            <details id="payload"><summary>Payload</summary><pre>\(d.payload)</pre>\(d.fcm.map { HTML("<p>FCM message</p><pre>\($0)</pre>") } ?? .empty)\(webMessage(d))</details>
            """
        return Page(title: "Job \(job.id)", body: body, tables: [platforms, reasons] + (zones.map { [$0] } ?? []), live: active)
    }

    /// Whether the page offers "Resend to failed tokens": a finished job (done or failed) with failures, not a
    /// channel broadcast and not expired (push.resend_failed refuses those). Whether any failed token qualifies
    /// is push.resend_failed's to say.
    static func canResend(_ d: DashboardJobDetail, now: Date = Date()) -> Bool {
        (d.job.state == "done" || d.job.state == "failed") && d.job.failed > 0 && d.channel == nil
            && !(d.expiresAt.map { $0 <= now } ?? false)
    }

    /// The job's own Web Push message and urgency, when it has them (otherwise the workers derive the message from
    /// the APNs payload: title, body, and the payload's other keys as `data`).
    static func webMessage(_ d: DashboardJobDetail) -> HTML {
        guard d.web != nil || d.webUrgency != nil else { return .empty }
        let urgency: HTML = d.webUrgency.map { HTML(" <span class=\"note\">(urgency \($0))</span>") } ?? .empty
        let message: HTML = d.web.map { HTML("<pre id=\"web-message\">\($0)</pre>") } ?? HTML("<p class=\"note\">derived from the payload</p>")
        return "<p>Web Push message\(urgency)</p>\(message)"
    }

    static func jobLink(_ id: Int64, _ context: PageContext) -> HTML {
        "<a href=\"\(context.link("/jobs/\(id)"))\">job \(id)</a>"
    }

    /// The open rate: exported as the fraction push.job_engagement gives, shown as `30.0 %` (`—` when nothing
    /// was delivered on that platform).
    static func openRate(_ rate: Double?) -> Cell {
        guard let rate else { return Cell(.null, html: "—") }
        return Cell(.number(rate), html: "\(String(format: "%.1f %%", 100 * rate))")
    }
}
