import CryptoExtras
import Foundation

/// A Google service account, as read from its JSON key file: everything needed to obtain FCM access tokens.
///
/// The file is a secret as a whole. Errors name the field that is wrong and never quote the file; the
/// description and mirror show only the project, the client email and the key id.
public struct FCMServiceAccount: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// `project_id`: the `{project_id}` of `/v1/projects/{project_id}/messages:send`.
    public let projectID: String
    /// `private_key_id`: the `kid` of the assertion header.
    public let privateKeyID: String
    /// `client_email`: the `iss` of the assertion.
    public let clientEmail: String
    /// `token_uri`: where assertions are exchanged for access tokens; also their `aud`.
    public let tokenURI: URL
    let privateKey: _RSA.Signing.PrivateKey

    /// The public half of the key, for checking assertions (tests, the simulator's token endpoint).
    public var publicKey: _RSA.Signing.PublicKey { privateKey.publicKey }

    /// Files larger than this are not service-account files (real ones are about 2.3 KB).
    static let maximumFileSize = 1 << 20

    /// Parses the contents of a service-account JSON file.
    ///
    /// - Throws: ``PGPushError`` with ``PGPushError/Code/invalidCredential``, naming the missing or bad field.
    public init(json: some DataProtocol) throws(PGPushError) {
        guard json.count <= Self.maximumFileSize else {
            throw Self.invalid("the service-account file is larger than 1 MiB")
        }
        // The JSON error is left out on purpose: it could quote the text around the point it failed at.
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any] else {
            throw Self.invalid("the service-account file is not a JSON object")
        }
        guard try Self.string("type", in: object) == "service_account" else {
            throw Self.invalid(#"the service-account file's "type" is not "service_account""#)
        }
        let tokenURIText = try Self.string("token_uri", in: object)
        guard let tokenURI = URL(string: tokenURIText) else {
            throw Self.invalid(#"the service-account file's "token_uri" is not a URL"#)
        }
        let pem = try Self.string("private_key", in: object)
        try self.init(
            projectID: Self.string("project_id", in: object),
            privateKeyID: Self.string("private_key_id", in: object),
            clientEmail: Self.string("client_email", in: object),
            tokenURI: tokenURI,
            privateKey: Self.rsaKey(pem: pem)
        )
    }

    /// Builds an account from parts, checking them as ``init(json:)`` does (e.g. for a simulator's own account).
    public init(
        projectID: String,
        privateKeyID: String,
        clientEmail: String,
        tokenURI: URL,
        privateKey: _RSA.Signing.PrivateKey
    ) throws(PGPushError) {
        guard Self.isValidProjectID(projectID) else {
            throw Self.invalid(#"the service account's "project_id" must be 1–100 letters, digits, '-', '.', ':' or '_'"#)
        }
        guard !privateKeyID.isEmpty, privateKeyID.utf8.count <= 256 else {
            throw Self.invalid(#"the service account's "private_key_id" must be 1–256 characters"#)
        }
        guard !clientEmail.isEmpty, clientEmail.utf8.count <= 320 else {
            throw Self.invalid(#"the service account's "client_email" must be 1–320 characters"#)
        }
        try Self.checkTokenURI(tokenURI)
        guard privateKey.keySizeInBits >= 2048 else {
            throw Self.invalid(#"the service account's "private_key" is shorter than 2048 bits"#)
        }
        self.projectID = projectID
        self.privateKeyID = privateKeyID
        self.clientEmail = clientEmail
        self.tokenURI = tokenURI
        self.privateKey = privateKey
    }

    public var description: String {
        "FCMServiceAccount(project: \(projectID), client: \(clientEmail), key id: \(privateKeyID))"
    }

    public var debugDescription: String { description }

    /// `dump()` and debuggers walk the mirror; this one has no key in it.
    public var customMirror: Mirror {
        Mirror(self, children: [
            "projectID": projectID, "privateKeyID": privateKeyID, "clientEmail": clientEmail, "tokenURI": tokenURI,
        ])
    }

    private static func string(_ field: String, in object: [String: Any]) throws(PGPushError) -> String {
        guard let value = object[field] else {
            throw invalid("the service-account file has no \"\(field)\"")
        }
        guard let text = value as? String, !text.isEmpty else {
            throw invalid("the service-account file's \"\(field)\" is not a non-empty string")
        }
        return text
    }

    private static func rsaKey(pem: String) throws(PGPushError) -> _RSA.Signing.PrivateKey {
        do {
            return try _RSA.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            // swift-crypto's errors do not echo the input, but keep them out of `description` anyway.
            throw PGPushError(
                .invalidCredential,
                #"the service-account file's "private_key" is not a PEM-encoded RSA private key of at least 2048 bits"#,
                underlying: error
            )
        }
    }

    /// The project id becomes a URL path segment; Google's ids are `[a-z][a-z0-9-]`, older domain-scoped
    /// ones look like `example.com:project`.
    private static func isValidProjectID(_ value: String) -> Bool {
        (1...100).contains(value.utf8.count) && value.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
                || byte == UInt8(ascii: ":") || byte == UInt8(ascii: "_")
        }
    }

    /// The assertion is a bearer credential for an hour, so it only travels over TLS, except to a simulator
    /// on this machine.
    private static func checkTokenURI(_ url: URL) throws(PGPushError) {
        let scheme = url.scheme?.lowercased()
        guard let host = url.host?.lowercased(), !host.isEmpty,
              scheme == "https" || (scheme == "http" && (host == "127.0.0.1" || host == "localhost"))
        else {
            throw invalid(#"the service account's "token_uri" must be an https URL (http only for 127.0.0.1 or localhost)"#)
        }
        guard url.user == nil, url.password == nil else {
            throw invalid(#"the service account's "token_uri" must not carry a user or password"#)
        }
    }

    private static func invalid(_ message: String) -> PGPushError {
        PGPushError(.invalidCredential, message)
    }
}
