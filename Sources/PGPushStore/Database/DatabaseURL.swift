import Foundation
import NIOSSL
import PGPushCore
import PostgresNIO

/// A PostgreSQL connection URL in libpq's form, `postgres://user:password@host:port/database?sslmode=require`.
///
/// `sslmode` is `disable`, `prefer` (the default, as in libpq) or `require`/`verify-ca`/`verify-full`. Unlike
/// libpq's `require`, pgpush always verifies the server certificate when it uses TLS: against the system roots,
/// or against `sslrootcert=PATH` when given.
public struct DatabaseURL: Sendable, CustomStringConvertible {
    public enum SSLMode: String, Sendable {
        case disable
        case prefer
        case require
    }

    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    public var sslMode: SSLMode
    public var sslRootCertificatePath: String?
    public var applicationName: String?

    public init(_ string: String) throws(PGPushError) {
        // `postgres:/user:secret@host/db` (a slash short, or one too many) parses as a path, which would become
        // the database name, password included, and appear in every error message: refuse it (a database name
        // has no ':' or '@'), and never echo the input.
        guard string.hasPrefix("postgres://") || string.hasPrefix("postgresql://"),
              let components = URLComponents(string: string),
              let scheme = components.scheme, scheme == "postgres" || scheme == "postgresql",
              !components.path.contains("@"), !components.path.contains(":")
        else {
            throw PGPushError(.invalidConfiguration, "database URL must look like postgres://user@host:port/database")
        }
        self.host = components.host.flatMap { $0.isEmpty ? nil : $0 } ?? "127.0.0.1"
        self.port = components.port ?? 5432
        self.username = components.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
        self.password = components.password.flatMap { $0.removingPercentEncoding }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        self.database = path.isEmpty ? self.username : (path.removingPercentEncoding ?? path)
        var sslMode = SSLMode.prefer
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                switch item.value ?? "" {
                case "disable", "allow": sslMode = .disable
                case "prefer": sslMode = .prefer
                case "require", "verify-ca", "verify-full": sslMode = .require
                default:
                    throw PGPushError(.invalidConfiguration, "database URL has an unknown sslmode '\(item.value ?? "")'")
                }
            case "sslrootcert":
                self.sslRootCertificatePath = item.value
            case "application_name":
                self.applicationName = item.value
            default:
                continue
            }
        }
        self.sslMode = sslMode
    }

    /// The URL with the password masked, safe for logs and error messages.
    public var description: String {
        let credentials = password == nil ? username : "\(username):***"
        return "postgres://\(credentials)@\(host):\(port)/\(database)?sslmode=\(sslMode.rawValue)"
    }

    /// Server-side limits for the statements of a worker's transactions, so a statement the client gave up on
    /// stops holding locks: PostgreSQL's `statement_timeout` and `lock_timeout`.
    ///
    /// They are set with `SET LOCAL` at the start of each transaction (``QueueStore``), never as startup
    /// parameters: PgBouncer refuses startup parameters it does not know (`jit`, the timeouts), and a plain
    /// `SET` would follow a pooled server connection to its next client. Statements outside a transaction
    /// take the login role's defaults: `ALTER ROLE <worker login> SET statement_timeout = '20s'`.
    public struct ServerTimeouts: Sendable, Hashable {
        public var statement: Duration
        public var lock: Duration

        public init(statement: Duration, lock: Duration) {
            self.statement = statement
            self.lock = lock
        }

        /// The worker's: well inside its lease, and below the client-side deadline of its calls.
        public static let worker = ServerTimeouts(statement: .seconds(20), lock: .seconds(5))

        /// `statement_timeout` in milliseconds, as `set_config` takes it.
        public var statementMilliseconds: String { "\(Self.milliseconds(statement))" }
        /// `lock_timeout` in milliseconds, as `set_config` takes it.
        public var lockMilliseconds: String { "\(Self.milliseconds(lock))" }

        private static func milliseconds(_ duration: Duration) -> Int64 {
            duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        }
    }

    /// A PostgresNIO client configuration for this URL.
    ///
    /// It sends no startup parameters, so that it connects through PgBouncer in transaction pooling as well as
    /// directly. `jit = off`, which pgpush's short statements want, is a database setting made by the
    /// migrations (0015).
    public func clientConfiguration(maximumConnections: Int = 8) throws(PGPushError) -> PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        switch sslMode {
        case .disable:
            tls = .disable
        case .prefer:
            tls = .prefer(try tlsConfiguration())
        case .require:
            tls = .require(try tlsConfiguration())
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.maximumConnections = maximumConnections
        configuration.options.minimumConnections = 0
        // Few pool timers, and short ones. PostgresNIO arms an idle timeout and a keep-alive timer whenever a
        // connection goes idle and cancels them at its next lease, but a cancelled timer stays scheduled until
        // its time comes: at hundreds of leases a second, a 60-second idle timeout and a 30-second keep-alive
        // kept a minute of dead timers alive and grew the worker's RSS from 55 MB at 100,000 devices to 61 MB
        // at 1,000,000. A connection idle for 5 s is closed instead of pinged (the next lease opens one), and
        // one that died quietly is caught by every statement's deadline (QueueStore.deadline). A minimum of
        // open connections is not an option: PostgresNIO's pool trips a precondition when connections to a
        // stopped server fail below its minimum.
        configuration.options.connectionIdleTimeout = .seconds(5)
        configuration.options.keepAliveBehavior = nil
        return configuration
    }

    /// A single-connection configuration (migrations, LISTEN, COPY).
    public func connectionConfiguration() throws(PGPushError) -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        switch sslMode {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(try NIOSSLContext.make(tlsConfiguration()))
        case .require: tls = .require(try NIOSSLContext.make(tlsConfiguration()))
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        return configuration
    }

    private func tlsConfiguration() throws(PGPushError) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .fullVerification
        if let path = sslRootCertificatePath {
            do {
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(path))
            } catch {
                throw PGPushError(.invalidConfiguration, "sslrootcert \(path) could not be read as PEM certificates")
            }
        }
        return tls
    }
}

extension NIOSSLContext {
    fileprivate static func make(_ configuration: TLSConfiguration) throws(PGPushError) -> NIOSSLContext {
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw PGPushError(.invalidConfiguration, "TLS to PostgreSQL could not be set up", underlying: error)
        }
    }
}
