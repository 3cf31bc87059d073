import Foundation
import PGPushStore

/// `/jobs`: filters in the URL, keyset pagination, a progress bar per platform on every row.
enum JobsPage {
    static let states = ["queued", "running", "done", "failed", "cancelled"]

    /// The filter a query string describes; values that do not parse are left out (the form still shows them).
    static func filter(_ q: FormData, pageSize: Int) -> DashboardJobFilter {
        DashboardJobFilter(
            app: q["app"], state: q["state"].flatMap { states.contains($0) ? $0 : nil },
            platform: Platforms.parse(q["platform"]),
            priority: q["priority"].flatMap { Int32($0) }, from: q["from"].flatMap(DateInput.parse),
            to: q["to"].flatMap(DateInput.parse), jobID: q["job"].flatMap { Int64($0) }, idempotencyKey: q["key"],
            labels: q.all("label").compactMap(label), before: q["before"].flatMap { Int64($0) }, limit: pageSize)
    }

    /// A `label` parameter: `campaign:black-friday` or `campaign=black-friday`, split at the first `:` or `=`
    /// (so a key holds neither); the key is 1 to 64 characters and the value at most 256, as push.jobs allows.
    /// Nil when malformed: like the other filters it is then left out, and the form says so.
    static func label(_ text: String) -> DashboardLabel? {
        guard let separator = text.firstIndex(where: { $0 == ":" || $0 == "=" }) else { return nil }
        let key = text[..<separator].trimmingCharacters(in: .whitespaces)
        let value = text[text.index(after: separator)...].trimmingCharacters(in: .whitespaces)
        guard (1...64).contains(key.count), value.count <= 256 else { return nil }
        return DashboardLabel(key, value)
    }

    /// A label's filter parameter, or nil for a key the parameter cannot carry (it holds `:` or `=`).
    static func parameter(_ label: DashboardLabel) -> String? {
        label.key.contains(where: { $0 == ":" || $0 == "=" }) ? nil : label.key + ":" + label.value
    }

    /// Labels as small `key=value` badges, each a link to the jobs carrying it (added to `query`'s filters).
    static func badges(_ labels: [DashboardLabel], _ context: PageContext, query: FormData = FormData(nil)) -> HTML {
        labels.map { label -> HTML in
            let text = label.key + "=" + label.value
            guard let parameter = parameter(label) else { return "<span class=\"badge\">\(text)</span> " }
            let href = context.link("/jobs", query.adding("label", parameter, removing: ["before", "format", "table"]))
            return "<a class=\"badge\" href=\"\(href)\" title=\"jobs labelled \(text)\">\(text)</a> "
        }.joined()
    }

    static func render(_ rows: [DashboardJobRow], filter: DashboardJobFilter, _ context: PageContext) -> Page {
        let q = context.query
        let more = rows.count > filter.limit
        let shown = Array(rows.prefix(filter.limit))
        let table = DataTable(
            name: "jobs",
            columns: ["job", "app", "state", "priority", "progress", "total", "delivered", "failed", "pruned", "created", "finished", "labels"],
            rows: shown.map { job in
                [
                    .integer(job.id, link: context.link("/jobs/\(job.id)")),
                    .text(job.appID, link: context.link("/apps/" + FormData.percentEncode(job.appID))),
                    .text(job.state),
                    .integer(Int64(job.priority)),
                    Cell(job.total.map { .number(Double(job.delivered + job.failed) / Double(max($0, 1))) } ?? .null, html: Charts.progress(job)),
                    .integer(job.total), .integer(job.delivered), .integer(job.failed), .integer(job.pruned),
                    Cell(.text(Format.iso(job.createdAt)!), html: "\(Format.time(job.createdAt))"),
                    Cell(Format.iso(job.finishedAt).map(CellValue.text) ?? .null, html: "\(Format.time(job.finishedAt))"),
                    Cell(job.labels.isEmpty ? .null : .text(job.labels.map { $0.key + "=" + $0.value }.joined(separator: ", ")),
                         html: badges(job.labels, context, query: q)),
                ]
            }, numeric: [3, 5, 6, 7, 8])

        func option(_ value: String, _ selected: String?) -> HTML {
            "<option value=\"\(value)\"\(selected == value ? HTML(" selected") : .empty)>\(value.isEmpty ? "any" : value)</option>"
        }
        // One field per label filter given, and an empty one to add another; all AND-ed.
        let given = q.all("label")
        let labelInputs = (given + [""]).map { value in
            HTML("<label>Label<input name=\"label\" value=\"\(value)\" placeholder=\"campaign:black-friday\" size=\"18\"></label>")
        }.joined()
        let malformed = given.filter { label($0) == nil }
        let labelProblem: HTML = malformed.isEmpty ? .empty : HTML("""
            <p id="label-problem" class="bad">Label filter \(malformed.map { "“" + $0 + "”" }.joined(separator: ", ")) left out: write key:value or key=value, such as campaign:black-friday.</p>
            """)
        let form: HTML = """
            <form class="filters" method="get" action="\(context.link("/jobs"))">
            <label>App<input name="app" value="\(q["app"])" size="12"></label>
            <label>State<select name="state">\((["" ] + states).map { option($0, q["state"] ?? "") })</select></label>
            <label>Platform<select name="platform">\(([""] + Platforms.all).map { option($0, q["platform"] ?? "") })</select></label>
            <label>Priority<input name="priority" value="\(q["priority"])" size="4" inputmode="numeric"></label>
            <label>Created from (UTC)<input name="from" value="\(q["from"])" placeholder="2026-11-25" size="16"></label>
            <label>to<input name="to" value="\(q["to"])" placeholder="2026-11-26T12:00" size="16"></label>
            <label>Job id<input name="job" value="\(q["job"])" size="8" inputmode="numeric"></label>
            <label>Idempotency key<input name="key" value="\(q["key"])" size="14"></label>
            \(labelInputs)
            <button type="submit">Filter</button> <a href="\(context.link("/jobs"))">clear</a>
            </form>
            \(labelProblem)
            """
        var pager: [HTML] = []
        if filter.before != nil { pager.append("<a href=\"\(context.link("/jobs", q.setting("before", nil)))\">« newest</a>") }
        if more, let last = shown.last {
            pager.append("<a id=\"older\" href=\"\(context.link("/jobs", q.setting("before", String(last.id))))\">older »</a>")
        }
        let body: HTML = """
            \(form)
            <p class="legend"><span class="ios">■ iOS delivered</span> · <span class="android">■ Android delivered</span> · <span class="web">■ Web delivered</span> · <span class="fail">■ failed</span> · pending in grey</p>
            \(Layout.table(table, context, empty: "No job matches."))
            <p class="pager">\(pager.map { $0 + " " })</p>
            """
        return Page(title: "Jobs", body: body, tables: [table], live: filter.before == nil)
    }
}

/// The dates of the filters, in UTC: `2026-11-25`, `2026-11-25T10:00` (a datetime-local field), or full ISO 8601.
enum DateInput {
    static func parse(_ text: String) -> Date? {
        let formats = ["yyyy-MM-dd'T'HH:mm:ssXXXXX", "yyyy-MM-dd'T'HH:mm:ss", "yyyy-MM-dd'T'HH:mm", "yyyy-MM-dd HH:mm", "yyyy-MM-dd"]
        for format in formats {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = .gmt
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}
