import Crypto
import CryptoExtras
import Foundation
import Testing
@testable import PGPushCore

/// One RSA key for all FCM tests: generating a 2048-bit key takes a noticeable fraction of a second.
let fcmTestKey: _RSA.Signing.PrivateKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

/// The fields of a real service-account file (its private key replaced by the test key).
func fcmServiceAccountFields(key: _RSA.Signing.PrivateKey = fcmTestKey) -> [String: Any] {
    [
        "type": "service_account",
        "project_id": "pgpush-test",
        "private_key_id": "0123456789abcdef0123456789abcdef01234567",
        "private_key": key.pkcs8PEMRepresentation,
        "client_email": "pgpush@pgpush-test.iam.gserviceaccount.com",
        "client_id": "123456789012345678901",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token",
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "universe_domain": "googleapis.com",
    ]
}

/// A service-account file with `changes` applied; a `nil` value removes the field.
func fcmServiceAccountJSON(_ changes: [String: Any?] = [:], key: _RSA.Signing.PrivateKey = fcmTestKey) -> Data {
    var fields = fcmServiceAccountFields(key: key)
    for (name, value) in changes {
        fields[name] = value
    }
    return try! JSONSerialization.data(withJSONObject: fields)
}

func fcmTestAccount() throws -> FCMServiceAccount {
    try FCMServiceAccount(json: fcmServiceAccountJSON())
}

/// A piece of the PEM's base64 body that no error or description may contain.
private let pemFragment: String = {
    let body = fcmTestKey.pkcs8PEMRepresentation.split(separator: "\n").dropFirst().first!
    return String(body.prefix(40))
}()

@Suite struct FCMServiceAccountTests {
    @Test func parsesARealLookingFile() throws {
        let account = try fcmTestAccount()
        #expect(account.projectID == "pgpush-test")
        #expect(account.privateKeyID == "0123456789abcdef0123456789abcdef01234567")
        #expect(account.clientEmail == "pgpush@pgpush-test.iam.gserviceaccount.com")
        #expect(account.tokenURI.absoluteString == "https://oauth2.googleapis.com/token")
        #expect(account.publicKey.derRepresentation == fcmTestKey.publicKey.derRepresentation)
    }

    @Test func acceptsPKCS1AsWell() throws {
        let account = try FCMServiceAccount(json: fcmServiceAccountJSON(["private_key": fcmTestKey.pemRepresentation]))
        #expect(fcmTestKey.pemRepresentation.contains("BEGIN RSA PRIVATE KEY"))
        #expect(account.publicKey.derRepresentation == fcmTestKey.publicKey.derRepresentation)
    }

    @Test func descriptionsDoNotRevealTheKey() throws {
        let account = try fcmTestAccount()
        var dumped = ""
        dump(account, to: &dumped)
        for text in [account.description, account.debugDescription, String(describing: account), String(reflecting: account), dumped] {
            #expect(text.contains("pgpush-test"))
            #expect(!text.contains("BEGIN"))
            #expect(!text.contains(pemFragment))
        }
    }

    @Test(arguments: ["type", "project_id", "private_key_id", "private_key", "client_email", "token_uri"])
    func missingFieldIsNamed(field: String) {
        expectRejection(fcmServiceAccountJSON([field: nil]), naming: field)
    }

    @Test(arguments: ["type", "project_id", "private_key_id", "private_key", "client_email", "token_uri"])
    func nonStringOrEmptyFieldIsNamed(field: String) {
        expectRejection(fcmServiceAccountJSON([field: 42]), naming: field)
        expectRejection(fcmServiceAccountJSON([field: ""]), naming: field)
    }

    @Test func notJSON() {
        expectRejection(Data("this is not JSON".utf8), naming: "not a JSON object")
        expectRejection(Data("[1, 2, 3]".utf8), naming: "not a JSON object")
        expectRejection(Data(), naming: "not a JSON object")
        // A truncated file: the key is in it, the error must not be.
        let truncated = fcmServiceAccountJSON().dropLast(10)
        expectRejection(Data(truncated), naming: "not a JSON object")
    }

    @Test func wrongType() {
        expectRejection(fcmServiceAccountJSON(["type": "authorized_user"]), naming: "type")
    }

    @Test func badPEM() {
        let garbage = "-----BEGIN PRIVATE KEY-----\nU0VDUkVUU0VDUkVUU0VDUkVU\n-----END PRIVATE KEY-----\n"
        let error = expectRejection(fcmServiceAccountJSON(["private_key": garbage]), naming: "private_key")
        #expect(error.map { !$0.debugDescription.contains("U0VDUkVU") } == true)
        expectRejection(fcmServiceAccountJSON(["private_key": "not a pem at all"]), naming: "private_key")
    }

    @Test func ecKeyInsteadOfRSA() {
        let ecPEM = P256.Signing.PrivateKey().pemRepresentation
        #expect(ecPEM.contains("BEGIN PRIVATE KEY"))
        let error = expectRejection(fcmServiceAccountJSON(["private_key": ecPEM]), naming: "private_key")
        let ecBody = String(ecPEM.split(separator: "\n")[1].prefix(30))
        #expect(error.map { !$0.debugDescription.contains(ecBody) } == true)
    }

    @Test func rsaKeyShorterThan2048Bits() throws {
        let short = try _RSA.Signing.PrivateKey(unsafeKeySize: .init(bitCount: 1024))
        expectRejection(fcmServiceAccountJSON(["private_key": short.pkcs8PEMRepresentation]), naming: "private_key")
    }

    @Test(arguments: [
        "http://oauth2.googleapis.com/token", "ftp://oauth2.googleapis.com/token", "https://", "oauth2.googleapis.com/token",
        "https://user:secret@oauth2.googleapis.com/token", "http://127.0.0.2/token", "http://localhost.example.com/token",
    ])
    func tokenURIMustBeHTTPS(uri: String) {
        expectRejection(fcmServiceAccountJSON(["token_uri": uri]), naming: "token_uri")
    }

    @Test(arguments: ["http://127.0.0.1:8443/token", "http://localhost/token", "HTTPS://oauth2.googleapis.com/token"])
    func tokenURIAllowsLoopbackHTTP(uri: String) throws {
        let account = try FCMServiceAccount(json: fcmServiceAccountJSON(["token_uri": uri]))
        #expect(account.tokenURI.absoluteString == uri)
    }

    @Test(arguments: ["projects/x", "a b", "x?y", String(repeating: "a", count: 101)])
    func projectIDMustBeAPathSegment(projectID: String) {
        expectRejection(fcmServiceAccountJSON(["project_id": projectID]), naming: "project_id")
    }

    @Test func acceptsDomainScopedProjectID() throws {
        let account = try FCMServiceAccount(json: fcmServiceAccountJSON(["project_id": "example.com:pgpush-test"]))
        #expect(account.projectID == "example.com:pgpush-test")
    }

    @Test func oversizedFile() {
        let padding = String(repeating: "x", count: FCMServiceAccount.maximumFileSize)
        expectRejection(fcmServiceAccountJSON(["padding": padding]), naming: "larger than")
    }

    @Test func memberwiseInitChecksToo() throws {
        let account = try FCMServiceAccount(
            projectID: "p-1", privateKeyID: "k", clientEmail: "c@example.com",
            tokenURI: URL(string: "http://127.0.0.1:9/token")!, privateKey: fcmTestKey
        )
        #expect(account.projectID == "p-1")
        #expect(throws: PGPushError.self) {
            try FCMServiceAccount(
                projectID: "p-1", privateKeyID: "k", clientEmail: "c@example.com",
                tokenURI: URL(string: "http://example.com/token")!, privateKey: fcmTestKey
            )
        }
    }
}

/// Expects `.invalidCredential` whose message contains `naming` and no key material; returns the error.
@discardableResult
private func expectRejection(_ json: Data, naming: String, sourceLocation: SourceLocation = #_sourceLocation) -> PGPushError? {
    do {
        let account = try FCMServiceAccount(json: json)
        Issue.record("accepted a bad service-account file: \(account)", sourceLocation: sourceLocation)
        return nil
    } catch {
        #expect(error.code == .invalidCredential, sourceLocation: sourceLocation)
        #expect(error.message.contains(naming), "\(error.message)", sourceLocation: sourceLocation)
        for text in [error.message, error.description, error.debugDescription] {
            #expect(!text.contains("BEGIN"), sourceLocation: sourceLocation)
            #expect(!text.contains(pemFragment), sourceLocation: sourceLocation)
        }
        return error
    }
}
