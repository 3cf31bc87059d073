import Crypto
import Foundation
import PGPushCore

/// A subscription the Web Push simulator made, as a browser's `pushManager.subscribe` would: a P-256 key pair
/// and a 16-byte auth secret, with an endpoint on the simulator. The simulator keeps the private half to
/// decrypt every message sent to it.
public struct WebPushSimulatorSubscription: Sendable {
    /// The opaque id: the last path segment of ``endpoint``.
    public let id: String
    /// What a browser's `PushSubscription.toJSON()` would give, parsed.
    public let subscription: WebPushSubscription
    /// The user agent's private key, whose public half is `p256dh`.
    public let privateKey: P256.KeyAgreement.PrivateKey
    /// The VAPID public key (`applicationServerKey`, base64url) the subscription was made with; pushes signed
    /// with any other key are refused with 403. `nil` accepts any key.
    public let applicationServerKey: String?
    /// How the push service answers it when it was made: live, 404 or 410.
    public let outcome: WebPushSimulatorRegistry.Outcome

    init(id: String, endpoint: String, privateKey: P256.KeyAgreement.PrivateKey, auth: [UInt8],
         applicationServerKey: String?, outcome: WebPushSimulatorRegistry.Outcome) throws(WebPushError) {
        self.id = id
        self.privateKey = privateKey
        self.applicationServerKey = applicationServerKey
        self.outcome = outcome
        self.subscription = try WebPushSubscription(
            endpoint: endpoint, keys: .init(p256dh: Array(privateKey.publicKey.x963Representation), auth: auth))
    }

    /// `https://<host>:<port>/push/<id>`.
    public var endpoint: String { subscription.endpoint }
    /// The 16-byte authentication secret.
    public var auth: [UInt8] { subscription.keys.auth }

    /// `PushSubscription.toJSON()`: `{"endpoint":…,"expirationTime":null,"keys":{"p256dh":…,"auth":…}}`.
    public var json: String {
        #"{"endpoint":"# + FCMSimulatorJSON.quoted(endpoint) + #","expirationTime":null,"keys":{"p256dh":""#
            + subscription.keys.p256dhBase64URL + #"","auth":""# + subscription.keys.authBase64URL + #""}}"#
    }

    /// A JSON array of the subscriptions' ``json`` objects, one per line.
    public static func jsonArray(_ subscriptions: [WebPushSimulatorSubscription]) -> String {
        "[\n" + subscriptions.map { "  " + $0.json }.joined(separator: ",\n") + (subscriptions.isEmpty ? "]\n" : "\n]\n")
    }

    /// Writes ``jsonArray(_:)`` to `path`, readable by its owner only (the keys are enough to push to the
    /// subscriptions).
    public static func write(_ subscriptions: [WebPushSimulatorSubscription], toFile path: String) throws {
        let url = URL(fileURLWithPath: path)
        try Data(jsonArray(subscriptions).utf8).write(to: url, options: .atomic)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
    }

    /// Decrypts a body sent to this subscription.
    public func decrypt(_ body: some DataProtocol) throws(WebPushError) -> [UInt8] {
        try WebPushEncryption.decrypt(body, privateKey: privateKey, auth: auth)
    }
}
