import Foundation
import PGPushStore

/// `/`: backlog, sends per minute, delivered share, paused apps (and apps whose Web Push alone is paused), workers,
/// enqueue→first-send latency.
enum OverviewPage {
    static func render(_ o: DashboardOverview, _ context: PageContext) -> Page {
        var series = Dictionary(uniqueKeysWithValues: Platforms.all.map { ($0, Array(repeating: Int64(0), count: 60)) })
        for s in o.sendsPerMinute where (0..<60).contains(s.minute) {
            series[s.platform, default: Array(repeating: 0, count: 60)][s.minute] += s.count
        }
        let paused = o.apps.filter { $0.pausedReason != nil }
        // Apps whose Web Push alone waits; an app paused as a whole is listed as such (its resume lifts both).
        let webPaused = o.apps.filter { $0.pausedReason == nil && $0.webPushPausedReason != nil }
        let sendsLastHour = o.sendsPerMinute.reduce(0) { $0 + $1.count }
        let stats = Layout.stats([
            ("Backlog (tokens)", "\(Format.count(o.backlogTokens))", nil),
            ("Oldest queued job", "\(Format.duration(o.oldestQueuedAgeSeconds))", nil),
            ("Delivered share (24 h)", "\(Format.percent(o.delivered, of: o.delivered + o.failed))", nil),
            ("Sends (last hour)", "\(Format.count(sendsLastHour))", nil),
            ("Paused apps", "\(paused.count)", paused.isEmpty ? nil : "bad"),
            ("Web Push paused", "\(webPaused.count)", webPaused.isEmpty ? nil : "bad"),
            ("Workers alive / ready", "\(o.workersAlive) / \(o.workersReady)", o.workersAlive == 0 ? "bad" : nil),
            ("Enqueue → first send p50 / p95", "\(Format.duration(o.enqueueToFirstSendP50)) / \(Format.duration(o.enqueueToFirstSendP95))", nil),
        ])
        let pausedList: HTML = paused.isEmpty
            ? (webPaused.isEmpty ? "<p class=\"empty\">No app is paused.</p>" : "<p class=\"empty\">No app is paused as a whole.</p>")
            : "<ul id=\"paused-apps\">\(paused.map { app in HTML("<li class=\"paused\"><a class=\"paused\" href=\"\(context.link("/apps/" + FormData.percentEncode(app.id)))\">\(app.id)</a>: \(app.pausedReason) <span class=\"note\">since \(Format.time(app.pausedAt))</span></li>") })</ul>"
        let webPausedList: HTML = webPaused.isEmpty ? .empty : """
            <h3>Web Push paused</h3>
            <p class="note">A push service refused the VAPID credential of these apps: their web devices wait, their APNs and FCM devices are sent. Fix the app's VAPID key or subject, then resume the app.</p>
            <ul id="web-push-paused-apps">\(webPaused.map { app in HTML("<li class=\"paused\"><a class=\"paused\" href=\"\(context.link("/apps/" + FormData.percentEncode(app.id)))\">\(app.id)</a>: Web Push paused: \(app.webPushPausedReason)</li>") })</ul>
            """

        let apps = DataTable(
            name: "apps", columns: ["app", "environment", "status", "paused since"],
            rows: o.apps.map { app in
                [
                    .text(app.id, link: context.link("/apps/" + FormData.percentEncode(app.id))),
                    .text(app.environment),
                    status(app),
                    Cell(Format.iso(app.pausedAt).map(CellValue.text) ?? .null, html: "\(Format.time(app.pausedAt))"),
                ]
            })
        var sendRows: [[Cell]] = []
        for minute in 0..<60 {
            let at = o.windowStart.addingTimeInterval(Double(minute) * 60)
            for platform in Platforms.all where series[platform]![minute] > 0 {
                sendRows.append([Cell(.text(Format.iso(at)!), html: "\(Format.time(at))"), .text(platform), .integer(series[platform]![minute])])
            }
        }
        let sends = DataTable(name: "sends", columns: ["minute", "platform", "sends"], rows: sendRows, numeric: [2])
        let body: HTML = """
            \(stats)
            <h2>Sends per minute, last hour</h2>
            <p class="legend">\(Platforms.all.map { HTML("<span class=\"\($0)\">■ \(Platforms.label($0))</span>") }.joined(separator: " · "))</p>
            \(Charts.sendsPerMinute(series, windowStart: o.windowStart))
            <h2>Paused apps</h2>
            \(pausedList)
            \(webPausedList)
            <h2>Apps</h2>
            \(Layout.table(apps, context, empty: "No app yet."))
            <details><summary>Sends per minute as a table</summary>
            \(Layout.table(sends, context, empty: "No sends in the last hour."))
            </details>
            <p class="note">Snapshot of \(Format.time(o.takenAt)), shared between viewers for a few seconds. Delivered share and latency: jobs that finished in the last 24 h or are running. Workers: alive = heartbeat within 30 s, ready = within 15 s.</p>
            """
        return Page(title: "Overview", body: body, tables: [apps, sends], live: true)
    }

    /// An app's status: `paused: …` (the whole app), `Web Push paused: …` (its web devices only), both, or `active`.
    static func status(_ app: DashboardAppSummary) -> Cell {
        let parts = [app.pausedReason.map { "paused: " + $0 }, app.webPushPausedReason.map { "Web Push paused: " + $0 }]
            .compactMap { $0 }
        guard !parts.isEmpty else { return .text("active") }
        return Cell(.text(parts.joined(separator: "; ")), html: parts.map { HTML("<span class=\"paused\">\($0)</span>") }.joined(separator: "; "))
    }
}
