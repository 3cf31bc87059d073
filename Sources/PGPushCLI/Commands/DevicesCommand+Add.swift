import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushCore
import PGPushStore
import PostgresNIO

/// `pgpush devices add`: one device token, or one browser's Web Push subscription, through push.register_device.
struct DevicesAddCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Register one device token or Web Push subscription (calls push.register_device).",
        discussion: """
            A device token: --token, with --platform ios (the default) or android. A Web Push subscription: \
            --subscription FILE (- for standard input) holding what the browser's subscription.toJSON() returns, \
            {"endpoint": "https://…", "expirationTime": null, "keys": {"p256dh": "…", "auth": "…"}}; its \
            platform is web and its endpoint is its token. The subscription is checked here first (an https \
            endpoint, a P-256 p256dh, a 16-byte auth) and again by the database; errors name the field, never \
            the endpoint or the keys.

            Registering a token or endpoint again updates it, as push.register_device does: --user and --tag \
            replace the stored ones (no --tag clears the tags), no --locale keeps the stored locale and no \
            --timezone the stored time zone (a device without one follows the app's default_timezone, which \
            local-time sends and quiet hours go by). --replaces \
            names the device's previous token or endpoint, which is deleted.

            Prints what was registered (--json: {"app_id": …, "platform": …, "origin": … for web}).

            Examples:
              pgpush devices add --app news --token 3f2a… --user 42 --tag sports
              pgpush devices add --app news --token 3f2a… --user 42 --timezone Europe/Paris
              pgpush devices add --app news --platform android --token fYK3…:APA91b…
              pgpush devices add --app news --platform web --subscription subscription.json --user 42
              curl -s https://example.com/debug/subscription | pgpush devices add --app news --subscription -

            Exit codes: 0 registered, 1 a bad subscription file, rejected by the database or a database error, \
            2 unknown app, 64 bad usage.
            """)

    enum Platform: String, ExpressibleByArgument, CaseIterable {
        case ios, android, web
    }

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "The app the device belongs to.")
    var app: String

    @Option(help: "ios, android or web (default: web with --subscription, else ios).")
    var platform: Platform?

    @Option(help: "The device token (ios or android).")
    var token: String?

    @Option(help: ArgumentHelp("A file with the PushSubscription JSON (web), - for standard input.", valueName: "file"))
    var subscription: String?

    @Option(name: .customLong("user"), help: "The user the device belongs to.")
    var user: String?

    @Option(name: .customLong("tag"), help: "A tag (repeatable); the device's tags are replaced by these.")
    var tags: [String] = []

    @Option(help: "A BCP 47 language tag, such as fr or fr-CA.")
    var locale: String?

    @Option(help: "The device's previous token or endpoint, deleted.")
    var replaces: String?

    @Option(help: ArgumentHelp("The device's IANA time zone, such as Europe/Paris.", valueName: "zone"))
    var timezone: String?

    @Flag(help: "Print JSON.")
    var json = false

    var effectivePlatform: Platform { platform ?? (subscription != nil ? .web : .ios) }

    func validate() throws {
        switch effectivePlatform {
        case .web:
            guard subscription != nil else {
                throw ValidationError("a web device is a Web Push subscription: give --subscription FILE (the browser's subscription.toJSON())")
            }
            if token != nil {
                throw ValidationError("give --subscription or --token, not both: a Web Push subscription's endpoint is its token")
            }
        case .ios, .android:
            if subscription != nil {
                throw ValidationError("--subscription is for --platform web; a \(effectivePlatform.rawValue) device has a --token")
            }
            guard token != nil else { throw ValidationError("give --token (or --subscription FILE for a Web Push subscription)") }
        }
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.devices")
        let url = try database.resolve()
        try await reportingFailures {
            var origin: String?
            var subscriptionJSON: String?
            if let subscription {
                let checked = try Self.readSubscription(subscription)
                origin = checked.subscription.origin.description
                subscriptionJSON = checked.json
            }
            let registration = DeviceRegistration(
                appID: app, platform: effectivePlatform.rawValue, token: token, subscription: subscriptionJSON, userID: user,
                tags: tags, locale: locale, replaces: replaces, timezone: timezone)
            try await withOperatorStore(url, logger: logger) { store in
                do {
                    try await store.registerDevice(registration)
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23503" {
                    // push.register_device raises foreign_key_violation for an unknown app.
                    throw OperatorError(.notFound, describeDatabaseError(error))
                }
            }
            if json {
                var object: [String: Any] = ["app_id": app, "platform": effectivePlatform.rawValue]
                if let origin { object["origin"] = origin }
                try printJSON(object)
            } else if let origin {
                print("pgpush: registered a Web Push subscription on \(origin) for \(app)")
            } else if let token {
                let shown = token.count > 8 ? "\(token.prefix(8))…" : token
                print("pgpush: registered \(effectivePlatform.rawValue) device \(shown) for \(app)")
            }
        }
    }

    /// Reads and checks a subscription file; the JSON goes to the database as given, the check only gives a
    /// clearer error first (naming the file and the field, never the endpoint or keys).
    static func readSubscription(_ path: String) throws -> (subscription: WebPushSubscription, json: String) {
        let data = try readInput(path)
        let name = path == "-" ? "standard input" : path
        guard let text = String(data: data, encoding: .utf8) else {
            throw OperatorError(.failed, "\(name) is not UTF-8 text")
        }
        do throws(WebPushError) {
            return (try WebPushSubscription(json: data), text)
        } catch {
            throw OperatorError(
                .failed, "\(name) is not a Web Push subscription: \(error.message) (expected the browser's subscription.toJSON(): "
                    + #"{"endpoint": "https://…", "expirationTime": null, "keys": {"p256dh": "…", "auth": "…"}})"#)
        }
    }
}
