import ArgumentParser
import Foundation
import PGPushStore
import PostgresNIO

struct AppsAddCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Register an app with an APNs credential (token or certificate), an FCM credential, Web Push, or several.",
        discussion: """
            Token auth: --team-id, --key-id and --key-file (the .p8 signing key). Certificate auth:
            --certificate (a PKCS#12 or PEM file) and, if it is encrypted, --certificate-password-env naming \
            the environment variable that holds the password on the workers. Android (FCM): \
            --fcm-project-id and --fcm-service-account (the service-account JSON file), beside an APNs \
            credential or instead of one; an Android-only app has no --topic. Web Push: --vapid-key (a P-256 \
            private key in PEM, made by `pgpush apps vapid-key --generate FILE`) and --vapid-subject (mailto: or \
            https:, as Apple's push service accepts it), beside the others or alone.

            Only the paths and names are stored; this command never reads a key or certificate into the \
            database. The paths are the workers' paths, so they must be absolute. If a file is missing or \
            unreadable on this host, a warning is printed and the app is still added (the workers may be other \
            machines); --require-files makes that an error instead. The VAPID key is the exception: it is read \
            here, because the public key the website subscribes with is derived from it and stored beside the \
            path, so it must be readable on this host too.

            Examples:
              pgpush apps add news --topic com.example.news --team-id ABCDE12345 --key-id KEY1234567 --key-file /etc/pgpush/news.p8
              pgpush apps add legacy --topic com.example.legacy --environment sandbox --certificate /etc/pgpush/legacy.p12 --certificate-password-env LEGACY_P12_PASSWORD --rate-limit 500
              pgpush apps add news --topic com.example.news --team-id ABCDE12345 --key-id KEY1234567 --key-file /etc/pgpush/news.p8 --fcm-project-id news-7f3a --fcm-service-account /etc/pgpush/news-firebase.json
              pgpush apps add news-android --fcm-project-id news-7f3a --fcm-service-account /etc/pgpush/news-firebase.json
              pgpush apps add news-web --vapid-key /etc/pgpush/news-vapid.pem --vapid-subject mailto:ops@example.com

            Exit codes: 0 added, 1 rejected by the database (e.g. the app exists), the VAPID key is unreadable \
            or not a P-256 key, or --require-files and a file is unreadable, 64 bad usage.
            """)

    enum Environment: String, ExpressibleByArgument, CaseIterable {
        case production, sandbox
    }

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The app id (letters, digits, . _ : -).")
    var app: String

    @Option(help: "The APNs topic, usually the bundle id (apps with an APNs credential).")
    var topic: String?

    @Option(help: "production or sandbox.")
    var environment: Environment = .production

    @Option(help: "Apple developer team id (token auth).")
    var teamID: String?

    @Option(help: "The signing key's id (token auth).")
    var keyID: String?

    @Option(help: "Absolute path of the .p8 signing key on the workers (token auth).")
    var keyFile: String?

    @Option(help: "Absolute path of the client certificate on the workers (certificate auth).")
    var certificate: String?

    @Option(help: "Name of the environment variable holding the certificate's password on the workers.")
    var certificatePasswordEnv: String?

    @Option(help: "At most this many notifications per second for the app across all workers.")
    var rateLimit: Int32?

    @Option(help: "The Firebase project id (FCM).")
    var fcmProjectID: String?

    @Option(help: "Absolute path of the Firebase service-account JSON file on the workers (FCM).")
    var fcmServiceAccount: String?

    @OptionGroup(title: "Web Push") var vapid: VAPIDOptions

    @Flag(help: "Fail instead of warning when a credential file is not readable here.")
    var requireFiles = false

    var credentialPath: String? { keyFile ?? certificate }
    var hasAPNs: Bool { [teamID, keyID, keyFile, certificate, certificatePasswordEnv, topic].contains { $0 != nil } }
    var hasFCM: Bool { fcmProjectID != nil || fcmServiceAccount != nil }

    func validate() throws {
        guard hasAPNs || hasFCM || vapid.isGiven else {
            throw ValidationError("give an APNs credential (--topic with --team-id/--key-id/--key-file or --certificate), an FCM credential (--fcm-project-id and --fcm-service-account), Web Push (--vapid-key and --vapid-subject), or several")
        }
        try vapid.validate()
        if hasFCM {
            guard fcmProjectID != nil, let fcmServiceAccount else {
                throw ValidationError("give both --fcm-project-id and --fcm-service-account")
            }
            if !fcmServiceAccount.hasPrefix("/") {
                throw ValidationError("the service-account path must be absolute (the workers read it): \(fcmServiceAccount)")
            }
        }
        if let rateLimit, rateLimit <= 0 { throw ValidationError("--rate-limit must be positive") }
        guard hasAPNs else { return }
        guard topic != nil else { throw ValidationError("an APNs credential needs --topic") }
        let token = [teamID, keyID, keyFile].map { $0 != nil }
        if certificate != nil {
            guard !token.contains(true) else {
                throw ValidationError("give either --team-id/--key-id/--key-file or --certificate, not both")
            }
        } else {
            guard !token.contains(false) else {
                throw ValidationError("give --team-id, --key-id and --key-file (token auth) or --certificate")
            }
            if certificatePasswordEnv != nil {
                throw ValidationError("--certificate-password-env only applies with --certificate")
            }
        }
        if let credentialPath, !credentialPath.hasPrefix("/") {
            throw ValidationError("the credential path must be absolute (the workers read it): \(credentialPath)")
        }
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            for path in [credentialPath, fcmServiceAccount].compactMap({ $0 }) where !FileManager.default.isReadableFile(atPath: path) {
                let problem = "\(path) is not readable on this host"
                if requireFiles { throw OperatorError(.failed, problem) }
                printError("pgpush: warning: \(problem); the workers must be able to read it")
            }
            let webPush = try vapid.settings()
            let registration = AppRegistration(
                id: app, environment: environment.rawValue, topic: topic, teamID: teamID, keyID: keyID, keyPath: keyFile,
                certificatePath: certificate, passwordEnv: certificatePasswordEnv, fcmProjectID: fcmProjectID,
                fcmServiceAccount: fcmServiceAccount, rateLimit: rateLimit, vapid: webPush)
            let added = try await withOperatorStore(url, logger: logger) { store in try await store.addApp(registration) }
            guard added else { throw OperatorError(.failed, "app \(app) already exists") }
            var credentials: [String] = []
            if hasAPNs { credentials.append("APNs \(environment.rawValue), \(keyFile != nil ? "token" : "certificate") auth") }
            if let fcmProjectID { credentials.append("FCM project \(fcmProjectID)") }
            if let webPush { credentials.append("Web Push as \(webPush.subject)") }
            print("pgpush: added app \(app) (\(credentials.joined(separator: "; ")))")
            if let webPush { print(VAPIDKeyCommand.applicationServerKeyNote(webPush.publicKey)) }
        }
    }
}
