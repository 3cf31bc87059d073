import Foundation
import PGPushStore

/// `/`: backlog, sends per minute, delivered share, paused apps, workers, enqueue→first-send latency.
enum OverviewPage {
    static func render(_ o: DashboardOverview, _ context: PageContext) -> Page {
        var series: [String: [Int64]] = ["ios": Array(repeating: 0, count: 60), "android": Array(repeating: 0, count: 60)]
        for s in o.sendsPerMinute where (0..<60).contains(s.minute) {
            series[s.platform, default: Array(repeating: 0, count: 60)][s.minute] += s.count
        }
        let paused = o.apps.filter { $0.pausedReason != nil }
        let sendsLastHour = o.sendsPerMinute.reduce(0) { $0 + $1.count }
        let stats = Layout.stats([
            ("Backlog (tokens)", "\(Format.count(o.backlogTokens))", nil),
            ("Oldest queued job", "\(Format.duration(o.oldestQueuedAgeSeconds))", nil),
            ("Delivered share (24 h)", "\(Format.percent(o.delivered, of: o.delivered + o.failed))", nil),
            ("Sends (last hour)", "\(Format.count(sendsLastHour))", nil),
            ("Paused apps", "\(paused.count)", paused.isEmpty ? nil : "bad"),
            ("Workers alive / ready", "\(o.workersAlive) / \(o.workersReady)", o.workersAlive == 0 ? "bad" : nil),
            ("Enqueue → first send p50 / p95", "\(Format.duration(o.enqueueToFirstSendP50)) / \(Format.duration(o.enqueueToFirstSendP95))", nil),
        ])
        let pausedList: HTML = paused.isEmpty
            ? "<p class=\"empty\">No app is paused.</p>"
            : "<ul id=\"paused-apps\">\(paused.map { app in HTML("<li class=\"paused\"><a class=\"paused\" href=\"\(context.link("/apps/" + FormData.percentEncode(app.id)))\">\(app.id)</a>: \(app.pausedReason) <span class=\"note\">since \(Format.time(app.pausedAt))</span></li>") })</ul>"

        let apps = DataTable(
            name: "apps", columns: ["app", "environment", "status", "paused since"],
            rows: o.apps.map { app in
                [
                    .text(app.id, link: context.link("/apps/" + FormData.percentEncode(app.id))),
                    .text(app.environment),
                    app.pausedReason.map { Cell(.text("paused: " + $0), html: "<span class=\"paused\">paused: \($0)</span>") } ?? .text("active"),
                    Cell(Format.iso(app.pausedAt).map(CellValue.text) ?? .null, html: "\(Format.time(app.pausedAt))"),
                ]
            })
        var sendRows: [[Cell]] = []
        for minute in 0..<60 {
            let at = o.windowStart.addingTimeInterval(Double(minute) * 60)
            for platform in ["ios", "android"] where series[platform]![minute] > 0 {
                sendRows.append([Cell(.text(Format.iso(at)!), html: "\(Format.time(at))"), .text(platform), .integer(series[platform]![minute])])
            }
        }
        let sends = DataTable(name: "sends", columns: ["minute", "platform", "sends"], rows: sendRows, numeric: [2])
        let body: HTML = """
            \(stats)
            <h2>Sends per minute, last hour</h2>
            <p class="legend"><span class="ios">■ iOS (APNs)</span> · <span class="android">■ Android (FCM)</span></p>
            \(Charts.sendsPerMinute(series, windowStart: o.windowStart))
            <h2>Paused apps</h2>
            \(pausedList)
            <h2>Apps</h2>
            \(Layout.table(apps, context, empty: "No app yet."))
            <details><summary>Sends per minute as a table</summary>
            \(Layout.table(sends, context, empty: "No sends in the last hour."))
            </details>
            <p class="note">Snapshot of \(Format.time(o.takenAt)), shared between viewers for a few seconds. Delivered share and latency: jobs that finished in the last 24 h or are running. Workers: alive = heartbeat within 30 s, ready = within 15 s.</p>
            """
        return Page(title: "Overview", body: body, tables: [apps, sends], live: true)
    }
}
