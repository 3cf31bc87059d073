import Foundation
import PGPushStore

/// `/apps/<id>`: settings, pause and who made it, a pause of its Web Push alone, the safety valve, prune candidates,
/// failures over 24 h.
enum AppPage {
    static func render(_ app: DashboardAppDetail, _ context: PageContext, valveShare: Double, minimumAnswers: Int64) -> Page {
        let share = app.windowAnswered > 0 ? Double(app.windowBadDeviceTokens) / Double(app.windowAnswered) : 0
        let valve: HTML = app.windowAnswered < minimumAnswers
            ? "\(Format.count(app.windowBadDeviceTokens)) BadDeviceToken of \(Format.count(app.windowAnswered)) answers (\(String(format: "%.1f %%", share * 100))); the valve judges from \(Format.count(minimumAnswers)) answers"
            : "<span class=\"\(share > valveShare ? "bad" : "")\">\(Format.count(app.windowBadDeviceTokens)) BadDeviceToken of \(Format.count(app.windowAnswered)) answers (\(String(format: "%.1f %%", share * 100))) against a threshold of \(String(format: "%.0f %%", valveShare * 100))</span>"
        let pause: HTML = app.pausedReason.map { reason in
            HTML("<span class=\"paused\" id=\"pause-reason\">paused: \(reason)</span> since \(Format.time(app.pausedAt)), by \(app.pausedBy ?? "a worker or pgpush apps pause (no pause_app row in push.operator_audit)")")
        } ?? "active"
        let auth = app.apnsAuth == "none" ? "no APNs credential" : "APNs \(app.apnsAuth) auth"
        // Web Push's own pause: the workers set it when a push service refuses the VAPID credential (401/403).
        // It is shown apart from the app's pause: APNs and FCM go on sending.
        let webPush: HTML
        if !app.webPushConfigured {
            webPush = "not configured"
        } else {
            let subject: HTML = app.vapidSubject.map { HTML("subject \($0)") } ?? "no subject"
            let key: HTML = app.vapidPublicKey.map { HTML("; public key (applicationServerKey) <code id=\"vapid-public-key\">\($0)</code>") } ?? .empty
            let state: HTML = app.webPushPausedReason.map { reason in
                HTML("<br><span class=\"paused\" id=\"web-push-pause-reason\">Web Push paused: \(reason)</span> <span class=\"note\">(only web devices wait; APNs and FCM keep sending; resuming the app lifts it)</span>")
            } ?? "<br>sending"
            webPush = "VAPID, \(subject)\(key)\(state)"
        }
        let facts: HTML = """
            <dl class="facts">
            <dt>Topic</dt><dd>\(app.topic ?? "—")</dd>
            <dt>Environment</dt><dd>\(app.environment)</dd>
            <dt>Authentication</dt><dd>\(auth)\(app.fcmProjectID.map { HTML("; FCM project \($0)") } ?? .empty)</dd>
            <dt>Rate limit</dt><dd>\(app.rateLimit.map { "\(Format.count(Int64($0))) notifications/s" } ?? "unlimited")</dd>
            <dt>Default time zone</dt><dd id="default-timezone">\(app.defaultTimezone) <span class="note">(of devices registered without one)</span></dd>
            <dt>Quiet hours</dt><dd id="quiet-hours">\(app.quietHours.map { HTML("\($0) <span class=\"note\">(each device's local time; jobs below priority 10 wait unless enqueued otherwise)</span>") } ?? "none")</dd>
            <dt>Frequency caps</dt><dd id="frequency-caps">\(frequencyCaps(app.frequencyCaps))</dd>
            <dt>Status</dt><dd>\(pause)</dd>
            <dt>Web Push</dt><dd id="web-push">\(webPush)</dd>
            <dt>Safety valve window</dt><dd>\(valve)</dd>
            <dt>Prune candidates</dt><dd>\(Format.count(app.suppressedPruneCandidates)) suppressed by the valve, \(Format.count(app.waitingPruneCandidates)) waiting</dd>
            </dl>
            """
        let appPath = "/apps/" + FormData.percentEncode(app.id)
        var actions: HTML = .empty
        if context.allowActions {
            let resume: HTML = "<form class=\"action\" method=\"post\" action=\"\(context.link(appPath + "/resume"))\"><button type=\"submit\" id=\"resume\">\(app.pausedReason == nil ? "Resume Web Push" : "Resume app")</button></form>"
            let pauseForm: HTML = "<form class=\"action\" method=\"post\" action=\"\(context.link(appPath + "/pause"))\"><input name=\"reason\" required maxlength=\"500\" placeholder=\"reason\"><button type=\"submit\">Pause app</button></form>"
            // A paused app offers its resume (which lifts a Web Push pause too); an app whose Web Push alone is
            // paused offers both: resuming its Web Push, and pausing the whole app.
            switch (app.pausedReason, app.webPushPausedReason) {
            case (nil, nil): actions = pauseForm
            case (nil, _?): actions = resume + pauseForm
            case (_?, _): actions = resume
            }
        }
        let failures = DataTable(
            name: "failures", columns: ["platform", "status", "reason", "count", "hint"],
            rows: app.failures.map { f in
                [.text(f.platform), .integer(Int64(f.status)), reasonCell(f.reason, context), .integer(f.count), .text(Remediation.hint(for: f.reason))]
            }, numeric: [1, 3])
        let body: HTML = """
            \(facts)
            \(actions)
            <p><a href="\(context.link("/jobs", FormData.encode([("app", app.id)])))">Jobs of \(app.id)</a> · <a href="\(context.link("/outcomes", FormData.encode([("app", app.id)])))">Outcomes</a> · <a href="\(context.link("/pruned", FormData.encode([("app", app.id)])))">Pruned</a></p>
            <h2>Top failure reasons, last 24 h</h2>
            \(Layout.table(failures, context, empty: "No failure in the last 24 hours."))
            """
        return Page(title: "App \(app.id)", body: body, tables: [failures])
    }

    /// `marketing: 3 per 24 hours · digest: 1 per 7 days`, by category; `none` without caps.
    static func frequencyCaps(_ json: String?) -> HTML {
        guard let json, let object = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any], !object.isEmpty
        else { return "none" }
        return object.keys.sorted().map { category -> HTML in
            let cap = object[category] as? [String: Any]
            let max = cap?["max"].map { "\($0)" } ?? "?"
            let per = cap?["per"].map { "\($0)" } ?? "?"
            return "<span class=\"cap\">\(category): \(max) per \(per)</span>"
        }.joined(separator: " · ")
    }

    /// A reason linked to its remediation hint.
    static func reasonCell(_ reason: String?, _ context: PageContext) -> Cell {
        guard let reason else { return Cell(.null, html: "—") }
        guard Remediation.hint(for: reason) != nil else { return .text(reason) }
        return Cell(.text(reason), html: "<a href=\"\(context.link("/outcomes"))#\(Remediation.anchor(reason))\">\(reason)</a>")
    }
}
