import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushStore
import PostgresNIO

struct AppsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apps",
        abstract: "Register, list, pause and resume apps, and grant them to producer logins.",
        discussion: """
            An app is one APNs topic with one credential, a Firebase project with its service account, a Web \
            Push (VAPID) key, or several of them. push.apps holds only where a credential is (a file path, the \
            name of an environment variable; for Web Push also the public key), never the key, certificate or \
            service account itself.

            Examples:
              pgpush apps add news --topic com.example.news --team-id ABCDE12345 --key-id KEY1234567 --key-file /etc/pgpush/news.p8
              pgpush apps list
              pgpush apps pause news --reason "wrong key, rotating"
              pgpush apps resume news
              pgpush apps grant billing_service news
              pgpush apps vapid-key --generate /etc/pgpush/news-vapid.pem
              pgpush apps set-vapid news --vapid-key /etc/pgpush/news-vapid.pem --vapid-subject mailto:ops@example.com
              pgpush apps set-broadcast-controls news --default-timezone Europe/Paris --quiet-hours 22:00-08:00

            Exit codes: 0 ok, 1 database error, 2 unknown app, 64 bad usage.
            """,
        subcommands: [AppsAddCommand.self, AppsListCommand.self, AppsPauseCommand.self, AppsResumeCommand.self, AppsConfirmStaleCommand.self,
                      AppsGrantCommand.self, AppsRevokeCommand.self, VAPIDKeyCommand.self, AppsSetVAPIDCommand.self,
                      AppsSetBroadcastControlsCommand.self])
}

struct AppsListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List apps with their credential kind, rate limit and pause state.",
        discussion: """
            --json prints one array of objects: app_id, topic, environment, auth (token, certificate, or \
            null without APNs), team_id, key_id, private_key_path, certificate_path, certificate_password_env \
            (the variable's name only), fcm_project_id, fcm_service_account_path, vapid_private_key_path, \
            vapid_public_key (the website's applicationServerKey), vapid_subject, rate_limit, paused_reason, \
            paused_at, web_push_paused_reason (set by the workers when a push service refused the VAPID key; \
            `pgpush apps resume` clears it), default_timezone, quiet_hours, frequency_caps (an object, or \
            null), created_at.

            Examples:
              pgpush apps list
              pgpush apps list --json | jq '.[] | select(.paused_reason != null or .web_push_paused_reason != null)'
              pgpush apps list --json | jq -r '.[] | select(.app_id == "news") | .vapid_public_key'

            Exit codes: 0 ok, 1 database error, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Flag(help: "Print JSON.")
    var json = false

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            let apps = try await withOperatorStore(url, logger: logger) { store in try await store.listApps() }
            if json {
                try printJSON(apps.map { app -> [String: Any] in
                    let object: [String: Any] = [
                        "app_id": app.id, "topic": jsonValue(app.topic), "environment": app.environment, "auth": jsonValue(app.auth),
                        "fcm_project_id": jsonValue(app.fcmProjectID), "fcm_service_account_path": jsonValue(app.fcmServiceAccount),
                        "team_id": jsonValue(app.teamID), "key_id": jsonValue(app.keyID),
                        "private_key_path": jsonValue(app.keyPath), "certificate_path": jsonValue(app.certificatePath),
                        "certificate_password_env": jsonValue(app.passwordEnv), "rate_limit": jsonValue(app.rateLimit.map { Int($0) }),
                        "vapid_private_key_path": jsonValue(app.vapidKeyPath), "vapid_public_key": jsonValue(app.vapidPublicKey),
                        "vapid_subject": jsonValue(app.vapidSubject), "web_push_paused_reason": jsonValue(app.webPushPausedReason),
                        "paused_reason": jsonValue(app.pausedReason), "paused_at": jsonValue(Timestamp.string(app.pausedAt)),
                        "created_at": jsonValue(Timestamp.string(app.createdAt)),
                    ]
                    return object.merging(app.controls.json(app: nil)) { first, _ in first }
                })
                return
            }
            guard !apps.isEmpty else {
                print("no apps: add one with `pgpush apps add`")
                return
            }
            var table = Table(["APP", "TOPIC", "ENV", "AUTH", "CREDENTIAL", "FCM PROJECT", "WEB PUSH", "RATE/S", "TIME ZONE",
                               "QUIET HOURS", "CAPS", "STATE", "PAUSED SINCE"])
            for app in apps {
                let credential = app.keyPath.map { "\($0) (team \(app.teamID ?? "-"), key \(app.keyID ?? "-"))" } ?? app.certificatePath
                table.append([
                    app.id, app.topic, app.environment, app.auth, credential, app.fcmProjectID, app.vapidSubject,
                    app.rateLimit.map { String($0) }, app.controls.defaultTimezone, app.controls.quietHours,
                    app.controls.capsText, app.state, Timestamp.string(app.pausedAt),
                ])
            }
            print(table.render())
        }
    }
}

struct AppsPauseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pause",
        abstract: "Stop sending for an app; its jobs wait until it is resumed.",
        discussion: """
            Sets paused_reason and paused_at. Workers claim no more work of a paused app; chunks in flight \
            finish. Pausing an app that is already paused replaces the reason.

            Examples:
              pgpush apps pause news --reason "certificate expired"

            Exit codes: 0 paused, 1 database error, 2 unknown app, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The app id.")
    var app: String

    @Option(help: "Why, for `apps list` and the paused-apps alert.")
    var reason: String = "paused by an operator"

    func validate() throws {
        if reason.isEmpty { throw ValidationError("--reason must not be empty") }
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            let paused = try await withOperatorStore(url, logger: logger) { store in
                try await store.pauseApp(app, reason: reason)
            }
            guard paused else { throw OperatorError(.notFound, "unknown app \(app)") }
            print("pgpush: paused \(app): \(reason)")
        }
    }
}

struct AppsResumeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Resume sending for a paused app.",
        discussion: """
            Clears paused_reason and paused_at; workers pick the app's waiting jobs up on their next poll. It \
            also clears web_push_paused_reason, which the workers set when a push service refuses the app's \
            VAPID key (401/403): fix the key or subject first (`pgpush apps set-vapid`). Resuming an app that \
            is not paused does nothing and succeeds.

            Examples:
              pgpush apps resume news

            Exit codes: 0 resumed (or was not paused), 1 database error, 2 unknown app, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The app id.")
    var app: String

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            let resumed = try await withOperatorStore(url, logger: logger) { store in try await store.resumeAppReporting(app) }
            guard let resumed else { throw OperatorError(.notFound, "unknown app \(app)") }
            switch (resumed.wasPaused, resumed.webPushWasPaused) {
            case (true, true): print("pgpush: resumed \(app) and its Web Push")
            case (true, false): print("pgpush: resumed \(app)")
            case (false, true): print("pgpush: resumed \(app)'s Web Push")
            case (false, false): print("pgpush: \(app) was not paused")
            }
        }
    }
}

extension AppBroadcastControls {
    /// `marketing 3/24 hours, digest 1/7 days`: the caps by category; `nil` (shown as `-`) when there are none.
    var capsText: String? {
        guard let frequencyCaps,
              let object = (try? JSONSerialization.jsonObject(with: Data(frequencyCaps.utf8))) as? [String: Any], !object.isEmpty
        else { return nil }
        return object.keys.sorted().map { category in
            let cap = object[category] as? [String: Any]
            return "\(category) \(cap?["max"].map { "\($0)" } ?? "?")/\(cap?["per"].map { "\($0)" } ?? "?")"
        }.joined(separator: ", ")
    }
}

extension AppListing {
    /// The APNs credential kind, or `nil` for an app without APNs.
    var auth: String? { keyPath != nil ? "token" : certificatePath != nil ? "certificate" : nil }

    /// `active`, or the pauses: the whole app's, and its Web Push's alone.
    var state: String {
        let pauses = [pausedReason.map { "paused: \($0)" }, webPushPausedReason.map { "Web Push paused: \($0)" }].compactMap { $0 }
        return pauses.isEmpty ? "active" : pauses.joined(separator: "; ")
    }
}
