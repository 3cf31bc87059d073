import Crypto
import Foundation
import PGPushTestSupport

/// Web Push inputs for the CLI tests: VAPID key files and browser subscriptions.
enum WebPushFixtures {
    /// The user agent's key and auth secret of RFC 8291's Appendix A example: a real P-256 point and 16 bytes.
    static let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"

    static func endpoint(_ index: Int) -> String {
        "https://updates.push.services.mozilla.com/wpush/v2/gAAAAAB-test-\(index)"
    }

    /// What a browser's `subscription.toJSON()` returns.
    static func subscription(_ index: Int, p256dh: String = p256dh, auth: String = auth) -> String {
        #"{"endpoint": "\#(endpoint(index))", "expirationTime": null, "keys": {"p256dh": "\#(p256dh)", "auth": "\#(auth)"}}"#
    }

    /// A new P-256 private key as PKCS#8 PEM in a temporary file, and the public key a website subscribes with.
    static func keyFile() throws -> (url: URL, applicationServerKey: String) {
        let key = P256.Signing.PrivateKey()
        let url = try temporaryFile(key.pemRepresentation, suffix: ".pem")
        return (url, base64URL(key.publicKey.x963Representation))
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Adds app `id` with Web Push only, through `pgpush apps add`; returns its key file (removed by the caller).
    static func addWebApp(_ db: TestDatabase, _ id: String = "news") async throws -> URL {
        let key = try keyFile()
        let run = try await CLIProcess.run([
            "apps", "add", id, "--database-url", db.urlString, "--vapid-key", key.url.path,
            "--vapid-subject", "mailto:ops@example.com",
        ])
        guard run.status == 0 else { throw CLITestError("apps add \(id) with Web Push failed: \(run)") }
        return key.url
    }
}
