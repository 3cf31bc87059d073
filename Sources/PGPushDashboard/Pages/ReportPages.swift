import Foundation
import PGPushStore

/// `/outcomes`: reason × platform × app × day, each reason linked to its remediation hint.
enum OutcomesPage {
    /// The ranges offered; the default is a day, so the page reads one or two daily partitions.
    static let ranges: [(key: String, seconds: Double)] = [("1h", 3600), ("24h", 86_400), ("7d", 7 * 86_400), ("30d", 30 * 86_400)]

    static func range(_ q: FormData) -> (key: String, seconds: Double) {
        ranges.first { $0.key == q["range"] } ?? ranges[1]
    }

    /// [from, to) cut at UTC midnights: one window per daily partition of push.deliveries.
    static func dayWindows(from: Date, to: Date) -> [(Date, Date)] {
        var windows: [(Date, Date)] = []
        var start = from
        while start < to {
            let midnight = (floor(start.timeIntervalSince1970 / 86_400) + 1) * 86_400
            let end = min(to, Date(timeIntervalSince1970: midnight))
            windows.append((start, end))
            start = end
        }
        return windows
    }

    /// Whether a window is a whole UTC day that ended at least 10 minutes before `now`: its outcomes no longer
    /// change (a worker writes a send's outcome within seconds of it).
    static func isClosedDay(from: Date, to: Date, now: Date) -> Bool {
        let start = from.timeIntervalSince1970, end = to.timeIntervalSince1970
        return start.truncatingRemainder(dividingBy: 86_400) == 0 && end - start == 86_400
            && end <= now.timeIntervalSince1970 - 600
    }

    /// Newest day first, then the biggest counts, as one statement over the range orders them.
    static func sorted(_ rows: [DashboardOutcome]) -> [DashboardOutcome] {
        rows.sorted { a, b in
            if a.day != b.day { return a.day > b.day }
            if a.count != b.count { return a.count > b.count }
            if a.appID != b.appID { return a.appID < b.appID }
            if a.platform != b.platform { return a.platform < b.platform }
            if a.status != b.status { return a.status < b.status }
            return (a.reason ?? "") < (b.reason ?? "")
        }
    }

    static func render(_ rows: [DashboardOutcome], _ context: PageContext) -> Page {
        let q = context.query
        let table = DataTable(
            name: "outcomes", columns: ["day", "app", "platform", "status", "reason", "count"],
            rows: rows.map { r in
                [.text(r.day), .text(r.appID, link: context.link("/apps/" + FormData.percentEncode(r.appID))), .text(r.platform),
                 .integer(Int64(r.status)), r.reason.map { reason in
                     Remediation.hint(for: reason) == nil
                         ? Cell.text(reason) : Cell(.text(reason), html: "<a href=\"#\(Remediation.anchor(reason))\">\(reason)</a>")
                 } ?? Cell(.null, html: "—"), .integer(r.count)]
            }, numeric: [3, 5])
        let selected = range(q).key
        let rangeOptions = ranges.map { r in
            HTML("<option value=\"\(r.key)\"\(r.key == selected ? HTML(" selected") : .empty)>last \(r.key)</option>")
        }.joined()
        let platformOptions = ([""] + Platforms.all).map { p in
            HTML("<option value=\"\(p)\"\(p == (q["platform"] ?? "") ? HTML(" selected") : .empty)>\(p.isEmpty ? "any" : p)</option>")
        }.joined()
        let present = Set(rows.compactMap(\.reason))
        let hints = Remediation.hints.sorted { present.contains($0.reason) && !present.contains($1.reason) }.map { h in
            HTML("<dt id=\"\(Remediation.anchor(h.reason))\"\(present.contains(h.reason) ? HTML(" class=\"bad\"") : .empty)>\(h.reason)</dt><dd>\(h.hint)</dd>")
        }.joined()
        let body: HTML = """
            <form class="filters" method="get" action="\(context.link("/outcomes"))">
            <label>Range<select name="range">\(rangeOptions)</select></label>
            <label>App<input name="app" value="\(q["app"])" size="12"></label>
            <label>Platform<select name="platform">\(platformOptions)</select></label>
            <label>Reason<input name="reason" value="\(q["reason"])" size="16"></label>
            <button type="submit">Filter</button> <a href="\(context.link("/outcomes"))">clear</a>
            </form>
            \(Layout.table(table, context, empty: "No outcome in this range."))
            <h2>What each reason means</h2>
            <dl class="facts" id="hints">\(hints)</dl>
            """
        return Page(title: "Outcomes", body: body, tables: [table])
    }
}

/// `/pruned`: pruned devices per app, day and reason over 30 days, and the newest ones.
enum PrunedPage {
    static func render(_ counts: [DashboardPrunedCount], _ recent: [DashboardPrunedDevice], _ context: PageContext) -> Page {
        let perDay = DataTable(
            name: "per-day", columns: ["day", "app", "reason", "pruned"],
            rows: counts.map { c in
                [.text(c.day), .text(c.appID, link: context.link("/apps/" + FormData.percentEncode(c.appID))), AppPage.reasonCell(c.reason, context), .integer(c.count)]
            }, numeric: [3])
        let list = DataTable(
            name: "recent", columns: ["pruned at", "app", "token", "reason", "job"],
            rows: recent.map { p in
                [Cell(.text(Format.iso(p.prunedAt)!), html: "\(Format.time(p.prunedAt))"),
                 .text(p.appID, link: context.link("/apps/" + FormData.percentEncode(p.appID))),
                 .text(Format.token(p.token)), AppPage.reasonCell(p.reason, context),
                 .integer(p.jobID, link: p.jobID.map { context.link("/jobs/\($0)") })]
            })
        let body: HTML = """
            <h2>Per app, day and reason (last 30 days)</h2>
            \(Layout.table(perDay, context, empty: "Nothing pruned in 30 days."))
            <h2>Most recent</h2>
            \(Layout.table(list, context, empty: "Nothing pruned."))
            <p class="note">Device tokens are shortened here and in the exports.</p>
            """
        return Page(title: "Pruned devices", body: body, tables: [perDay, list])
    }
}

/// `/audit`: operator actions, newest first.
enum AuditPage {
    static func render(_ rows: [DashboardAuditEntry], limit: Int, _ context: PageContext) -> Page {
        let shown = Array(rows.prefix(limit))
        let table = DataTable(
            name: "audit", columns: ["id", "at", "actor", "action", "app", "detail"],
            rows: shown.map { a in
                [.integer(a.id), Cell(.text(Format.iso(a.at)!), html: "\(Format.time(a.at))"), .text(a.actor), .text(a.action),
                 a.appID.map { .text($0, link: context.link("/apps/" + FormData.percentEncode($0))) } ?? Cell(.null, html: "—"),
                 .text(a.detail)]
            })
        var pager: [HTML] = []
        if context.query["before"] != nil { pager.append("<a href=\"\(context.link("/audit", context.query.setting("before", nil)))\">« newest</a>") }
        if rows.count > limit, let last = shown.last {
            pager.append("<a href=\"\(context.link("/audit", context.query.setting("before", String(last.id))))\">older »</a>")
        }
        let body: HTML = """
            \(Layout.table(table, context, empty: "No operator action recorded."))
            <p class="pager">\(pager.map { $0 + " " })</p>
            """
        return Page(title: "Operator audit", body: body, tables: [table])
    }
}
