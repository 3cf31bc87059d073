import Foundation
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Generated hostile input for what reads configuration: `DATABASE_URL` strings and key files. Every input gets
/// a clear error (or parses), without a crash or a leaked secret. The seed is printed; set PGPUSH_FUZZ_SEED to
/// replay a run.
@Suite(.timeLimit(.minutes(5)))
struct HostileInputTests {
    static let seed = ProcessInfo.processInfo.environment["PGPUSH_FUZZ_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64.max)

    @Test func aURLOneSlashShortOrOneTooManyIsRefusedWithoutBecomingADatabaseName() {
        for text in ["postgres:/user:Secret-1@db/push", "postgres:///user:Secret-1@db/push", "postgres:///user:Secret-1?x@db"] {
            #expect(throws: PGPushError.self) { try DatabaseURL(text) }
            do { _ = try DatabaseURL(text) } catch { #expect(!error.description.contains("Secret-1")) }
        }
        // A socket-style URL without a host still parses.
        #expect((try? DatabaseURL("postgres:///push"))?.database == "push")
    }

    @Test func fifteenHundredHostileDatabaseURLsAreRefusedClearlyWithoutThePassword() {
        print("HostileInputTests seed \(Self.seed)")
        var random = HostileRandom(seed: Self.seed &+ 1)
        for _ in 0..<1_500 {
            let password = "Pw" + random.text(maximumLength: 12, alphabet: .printable).replacingOccurrences(of: "@", with: "")
            let text = random.databaseURL(password: password)
            do {
                let url = try DatabaseURL(text)
                #expect(!url.description.contains(password) || password.count < 3, "\(text)")
            } catch {
                #expect(!error.description.isEmpty)
                #expect(password.count < 4 || !error.description.contains(password), "the password is in: \(error.description)")
            }
        }
    }

    @Test func fiveHundredBrokenKeyFilesAreRefusedWithoutTheirContents() throws {
        var random = HostileRandom(seed: Self.seed &+ 2)
        for round in 0..<500 {
            let secret = "SECRET" + String(round)
            let contents = random.brokenPEM(secret: secret)
            #expect {
                try ProviderTokenSigner(teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: contents)
            } throws: { error in
                guard let error = error as? PGPushError else { return false }
                return error.code == .invalidCredential && !error.description.contains(secret)
            }
        }
    }
}

/// A seeded generator of hostile values (SplitMix64), so a failing run can be replayed from its seed.
struct HostileRandom {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    enum Alphabet { case printable, unicode }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func int(in range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(next() % UInt64(range.count))
    }

    mutating func chance(_ p: Double) -> Bool { Double(next() % 1_000_000) / 1_000_000 < p }

    mutating func pick<T>(_ values: [T]) -> T { values[int(in: 0...(values.count - 1))] }

    mutating func text(maximumLength: Int, alphabet: Alphabet) -> String {
        let length = chance(0.02) ? int(in: 0...(maximumLength * 20)) : int(in: 0...maximumLength)
        var scalars = String.UnicodeScalarView()
        for _ in 0..<length {
            switch alphabet {
            case .printable: scalars.append(Unicode.Scalar(UInt8(int(in: 0x20...0x7E))))
            case .unicode:
                let pools: [ClosedRange<UInt32>] = [0x20...0x7E, 0x01...0x1F, 0xA0...0x2FF, 0x400...0x4FF, 0x4E00...0x4FFF,
                                                    0x1F600...0x1F64F, 0xFFF0...0xFFFD, 0x200B...0x200F]
                let pool = pick(pools)
                if let scalar = Unicode.Scalar(UInt32(int(in: Int(pool.lowerBound)...Int(pool.upperBound)))) { scalars.append(scalar) }
            }
        }
        return String(scalars)
    }

    mutating func databaseURL(password: String) -> String {
        let schemes = ["postgres://", "postgresql://", "http://", "", "postgres:/", "postgres:///"]
        let hosts = ["db", "127.0.0.1", "[::1]", "", "höst", String(repeating: "h", count: 300)]
        let ports = ["", ":5432", ":0", ":99999", ":-1", ":abc", ":"]
        let queries = ["", "?sslmode=require", "?sslmode=bogus", "?sslrootcert=", "?sslmode=verify-full&sslrootcert=/nonexistent.pem",
                       "?application_name=\(text(maximumLength: 20, alphabet: .printable))", "?&&=", "?sslmode"]
        var url = pick(schemes) + pick(["user", "", "us%20er", "ü"]) + pick([":" + password, ""]) + "@" + pick(hosts) + pick(ports)
            + pick(["/db", "", "/", "/d%2Fb", "/" + text(maximumLength: 20, alphabet: .unicode)]) + pick(queries)
        if chance(0.2) { url = String(url.prefix(int(in: 0...url.count))) }
        if chance(0.1) { url = text(maximumLength: 200, alphabet: .unicode) }
        return url
    }

    /// PEM-ish key files that are not a usable P-256 key: truncated, empty, binary, oversized, wrong type.
    mutating func brokenPEM(secret: String) -> String {
        let body = Data((secret + text(maximumLength: 200, alphabet: .printable)).utf8).base64EncodedString()
        switch int(in: 0...6) {
        case 0: return ""
        case 1: return "-----BEGIN PRIVATE KEY-----\n\(body)\n-----END PRIVATE KEY-----\n"
        case 2: return "-----BEGIN PRIVATE KEY-----\n\(body)"
        case 3: return String(decoding: (0..<int(in: 1...2000)).map { _ in UInt8(truncatingIfNeeded: next()) }, as: UTF8.self) + secret
        case 4: return "-----BEGIN EC PRIVATE KEY-----\n\(body)\n-----END EC PRIVATE KEY-----\n"
        case 5: return "-----BEGIN PRIVATE KEY-----\n" + String(repeating: body + "\n", count: 2000) + "-----END PRIVATE KEY-----\n"
        default: return secret + "\n" + text(maximumLength: 500, alphabet: .unicode)
        }
    }
}

