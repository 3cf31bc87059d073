import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushCore
import PGPushStore

/// `pgpush apps vapid-key`: makes a VAPID key file, or shows the public key of one.
struct VAPIDKeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vapid-key",
        abstract: "Generate a Web Push (VAPID) key file, or print the public key of one.",
        discussion: """
            --generate FILE writes a new P-256 private key as PEM (PKCS#8) to FILE, readable by its owner only \
            (mode 0600), and prints its public key: base64url of the uncompressed point, which the website passes \
            to pushManager.subscribe as applicationServerKey. It never overwrites a file: rotating the key means \
            every browser must subscribe again, so a new key is a new file. Copy the file to the workers and \
            register it with `pgpush apps add … --vapid-key FILE` or `pgpush apps set-vapid`.

            Given an existing FILE instead, it prints that key's public key.

            --json prints {"file": …, "application_server_key": …}.

            Examples:
              pgpush apps vapid-key --generate /etc/pgpush/news-vapid.pem
              pgpush apps vapid-key /etc/pgpush/news-vapid.pem

            Exit codes: 0 ok, 1 the file exists (--generate), cannot be written or read, or is not a P-256 \
            private key, 64 bad usage.
            """)

    @Option(help: ArgumentHelp("Write a new private key to this file (it must not exist).", valueName: "file"))
    var generate: String?

    @Argument(help: ArgumentHelp("An existing key file whose public key to print.", valueName: "file"))
    var file: String?

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        if (generate == nil) == (file == nil) {
            throw ValidationError("give --generate FILE (a new key) or FILE (an existing key), not both")
        }
    }

    func run() async throws {
        try await reportingFailures {
            let path: String
            let key: VAPIDKey
            if let generate {
                key = VAPIDKey.generate()
                try Self.writeNewKeyFile(key.privateKeyPEM, to: generate)
                path = generate
            } else {
                path = file ?? ""
                do throws(WebPushError) {
                    key = try VAPIDKey(pemFile: path)
                } catch {
                    throw OperatorError(.failed, error.message)
                }
            }
            if json {
                try printJSON(["file": path, "application_server_key": key.applicationServerKey])
                return
            }
            if generate != nil { print("pgpush: wrote a new VAPID private key to \(path) (mode 0600)") }
            print(Self.applicationServerKeyNote(key.applicationServerKey))
        }
    }

    /// The line that hands the public key to whoever builds the website.
    static func applicationServerKeyNote(_ publicKey: String) -> String {
        "applicationServerKey (for the website's pushManager.subscribe): \(publicKey)"
    }

    /// Creates `path` with mode 0600 and writes `pem`; refuses an existing file (O_EXCL, so a file that appears
    /// meanwhile is refused too) rather than replace a key that browsers may be subscribed with.
    static func writeNewKeyFile(_ pem: String, to path: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else {
            let reason = errno == EEXIST
                ? "it exists; a new key needs a new file (rotating the key makes every browser subscribe again)"
                : String(cString: strerror(errno))
            throw OperatorError(.failed, "cannot create \(path): \(reason)")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: Data(pem.utf8))
            try handle.synchronize()
            try handle.close()
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw OperatorError(.failed, "cannot write \(path): \(error.localizedDescription)")
        }
    }
}

/// `pgpush apps set-vapid`: gives an existing app Web Push, or replaces its VAPID key or subject.
struct AppsSetVAPIDCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set-vapid",
        abstract: "Set an existing app's Web Push key and subject.",
        discussion: """
            Stores the VAPID key's path (the workers read the file), the public key derived from it and the \
            subject, as `pgpush apps add --vapid-key --vapid-subject` does for a new app. The key file must be \
            readable here too. Replacing the key with another one means every browser must subscribe again \
            with the new applicationServerKey; a warning says so. A Web Push pause is not lifted: run \
            `pgpush apps resume` once the new key is on the workers.

            Examples:
              pgpush apps set-vapid news --vapid-key /etc/pgpush/news-vapid.pem --vapid-subject mailto:ops@example.com

            Exit codes: 0 set, 1 rejected by the database, or the key is unreadable or not a P-256 key, \
            2 unknown app, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The app id.")
    var app: String

    @OptionGroup(title: "Web Push") var vapid: VAPIDOptions

    func validate() throws {
        guard vapid.vapidKey != nil, vapid.vapidSubject != nil else {
            throw ValidationError("give both --vapid-key and --vapid-subject")
        }
        try vapid.validate()
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            guard let settings = try vapid.settings() else { return }
            let change = try await withOperatorStore(url, logger: logger) { store in try await store.setVAPID(app, settings) }
            guard let change else { throw OperatorError(.notFound, "unknown app \(app)") }
            print("pgpush: set Web Push of \(app) (as \(settings.subject))")
            print(VAPIDKeyCommand.applicationServerKeyNote(settings.publicKey))
            if let previous = change.previousPublicKey, previous != settings.publicKey {
                printError("pgpush: warning: \(app) had another VAPID key; browsers subscribed with it must subscribe again with the new applicationServerKey")
            }
            if let reason = change.webPushPausedReason {
                printError("pgpush: \(app)'s Web Push is still paused (\(reason)); run `pgpush apps resume \(app)` once the workers have the key")
            }
        }
    }
}
