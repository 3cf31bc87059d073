import Testing
import PGPushCore

@Suite struct LogRedactionTests {
    let token = String(repeating: "ab12", count: 16)

    @Test func wholeDeviceTokensAreShortenedWhereverTheyAppear() {
        let longer = String(repeating: "F0", count: 50)
        let text = "Key (app_id, token)=(news, \(token)) already exists; also \(longer)."
        let redacted = LogRedaction.redact(text)
        #expect(!redacted.contains(token) && !redacted.contains(longer))
        #expect(redacted.contains("ab12ab12…") && redacted.contains("F0F0F0F0…"))
        #expect(redacted.hasPrefix("Key (app_id, token)=(news, "))
        // Shorter hex (ids, hashes of other sizes) is not a device token and stays readable.
        let id = "job 9f86d081884c7d65 failed"
        #expect(LogRedaction.redact(id) == id)
    }

    @Test func jwtsPEMBlocksAndURLPasswordsAreRemoved() {
        let jwt = "eyJhbGciOiJFUzI1NiIsImtpZCI6IktFWTEyMzQ1NjcifQ.eyJpc3MiOiJURUFNMTIzNDU2IiwiaWF0IjoxNzAwMDAwMDAwfQ.c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJl"
        let pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49\n-----END PRIVATE KEY-----"
        let url = "postgres://pgpush:s3cret-Pa55@db.internal:5432/push?sslmode=verify-full"
        let redacted = LogRedaction.redact("authorization: bearer \(jwt); key: \(pem); url: \(url)")
        #expect(!redacted.contains("c2lnbmF0dXJl"))
        #expect(!redacted.contains("MIGHAgEAMBMG"))
        #expect(!redacted.contains("s3cret-Pa55"))
        #expect(redacted.contains("postgres://pgpush:***@db.internal:5432/push"))
        #expect(redacted.contains("[PEM block redacted]"))
    }

    @Test func ordinaryTextIsUntouched() {
        for text in ["claim failed; backing off", "connect(descriptor:addr:size:): Connection refused (errno: 111)",
                     "https://127.0.0.1:2197/3/device/", "", "é ü 😀 and a sentence long enough"] {
            #expect(LogRedaction.redact(text) == text)
        }
    }
}
