import ArgumentParser
import Foundation
import PGPushCore
import PGPushStore

/// `--vapid-key FILE --vapid-subject URI`: an app's Web Push settings, for `apps add` and `apps set-vapid`.
///
/// Unlike the APNs and FCM credentials, the key file is read here: the public key the website subscribes with
/// (`applicationServerKey`) is derived from it and stored beside the path. Only the path and the public key
/// reach the database, never the private key.
struct VAPIDOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Absolute path of the VAPID private key (P-256 PEM) on the workers; read here to derive the public key.",
            valueName: "file"))
    var vapidKey: String?

    @Option(
        help: ArgumentHelp(
            "The VAPID subject: mailto:ops@example.com or an https: URL of whoever operates the sender.",
            valueName: "uri"))
    var vapidSubject: String?

    var isGiven: Bool { vapidKey != nil || vapidSubject != nil }

    func validate() throws {
        guard isGiven else { return }
        guard let vapidKey, let vapidSubject else {
            throw ValidationError("give both --vapid-key and --vapid-subject (Web Push needs a key and a subject)")
        }
        if !vapidKey.hasPrefix("/") {
            throw ValidationError("the VAPID key path must be absolute (the workers read it): \(vapidKey)")
        }
        do throws(WebPushError) {
            _ = try VAPIDSubject(vapidSubject)
        } catch {
            // The message says which rule the subject breaks, e.g. Apple's refusal of `mailto: ops@…`.
            throw ValidationError("--vapid-subject: \(error.message)")
        }
    }

    /// The settings to store, reading the key file for its public key; `nil` when neither flag was given.
    ///
    /// - Throws: `OperatorError` (exit 1) naming the file, never its contents, when it cannot be read or is not a
    ///   P-256 private key.
    func settings() throws -> VAPIDSettings? {
        guard let vapidKey, let vapidSubject else { return nil }
        let key: VAPIDKey
        do throws(WebPushError) {
            key = try VAPIDKey(pemFile: vapidKey)
        } catch {
            throw OperatorError(.failed, error.message + "; generate one with `pgpush apps vapid-key --generate FILE`")
        }
        return VAPIDSettings(keyPath: vapidKey, publicKey: key.applicationServerKey, subject: vapidSubject)
    }
}
