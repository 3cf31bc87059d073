import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PGPushStore
import PostgresNIO

/// Why a connection to PostgreSQL could not be opened, in words an operator can act on.
///
/// Every command that connects reports a failure through this one mapping, so a refused port, a missing
/// database, a wrong password or a TLS mismatch reads the same everywhere, names the server
/// (host, port, database, user) and never contains the password.
public struct ConnectionFailure: Error, CustomStringConvertible {
    public enum Kind: Equatable, Sendable {
        /// Nothing answered: connection refused, timed out, no route, or the host name did not resolve.
        case unreachable
        /// SQLSTATE 3D000.
        case noSuchDatabase
        /// SQLSTATE 28P01/28000, or the server wants a password the URL does not give.
        case authenticationFailed
        /// TLS was required but refused, or its handshake failed.
        case tls
        /// Anything else the server or the connection said.
        case other
    }

    public let kind: Kind
    /// The whole message: where, then what went wrong.
    public let description: String

    public init(_ error: any Error, url: DatabaseURL) {
        let (kind, reason) = Self.classify(error, url: url)
        self.kind = kind
        var message = "cannot connect to database \"\(url.database)\" at \(url.host):\(url.port) as user \"\(url.username)\": \(reason)"
        if let password = url.password, !password.isEmpty {
            // Neither PostgreSQL nor PostgresNIO echoes a password, but a message must never carry one.
            message = message.replacingOccurrences(of: password, with: "***")
        }
        self.description = message
    }

    private static func classify(_ error: any Error, url: DatabaseURL) -> (Kind, String) {
        if let error = error as? ConnectionFailure { return (error.kind, error.description) }
        if let error = error as? PSQLError {
            switch error.code {
            case .server:
                return classifyServer(error, url: url)
            case .sslUnsupported:
                return (.tls, "TLS refused: the server does not accept TLS connections, and the URL asks for "
                    + "sslmode=\(url.sslMode.rawValue) (use sslmode=prefer or sslmode=disable to connect without TLS)")
            case .failedToAddSSLHandler:
                return (.tls, "TLS could not be set up for this connection")
            case .authMechanismRequiresPassword:
                return (.authenticationFailed, "authentication failed: the server asks for a password and the URL gives none")
            case .unsupportedAuthMechanism:
                return (.authenticationFailed, "authentication failed: the server asks for an authentication method pgpush does not support")
            case .saslError:
                return (.authenticationFailed, "authentication failed (SCRAM exchange)")
            case .connectionError:
                if let underlying = error.underlying { return classifyTransport(underlying, url: url) }
                return (.unreachable, "unreachable")
            case .serverClosedConnection:
                return (.other, "the server closed the connection during start-up")
            default:
                if let underlying = error.underlying { return classifyTransport(underlying, url: url) }
                return (.other, "\(error.code)")
            }
        }
        return classifyTransport(error, url: url)
    }

    private static func classifyServer(_ error: PSQLError, url: DatabaseURL) -> (Kind, String) {
        let state = error.serverInfo?[.sqlState] ?? ""
        let message = error.serverInfo?[.message] ?? "server error"
        switch state {
        case "3D000":
            return (.noSuchDatabase, "database \"\(url.database)\" does not exist on this server (SQLSTATE 3D000)")
        case "28P01", "28000":
            return (.authenticationFailed, "authentication failed: \(message) (SQLSTATE \(state))")
        default:
            return (.other, "\(message) (SQLSTATE \(state))")
        }
    }

    private static func classifyTransport(_ error: any Error, url: DatabaseURL) -> (Kind, String) {
        switch error {
        case let error as NIOConnectionError:
            if let dns = error.dnsAError ?? error.dnsAAAAError {
                return (.unreachable, "unreachable: host name \(url.host) could not be resolved (\(dns))")
            }
            if let first = error.connectionErrors.first {
                return classifyTransport(first.error, url: url)
            }
            return (.unreachable, "unreachable: host name \(url.host) has no address")
        case let error as IOError:
            switch error.errnoCode {
            case ECONNREFUSED:
                return (.unreachable, "unreachable: connection refused (is PostgreSQL running and listening on port \(url.port)?)")
            case ETIMEDOUT:
                return (.unreachable, "unreachable: connection timed out")
            case EHOSTUNREACH, ENETUNREACH:
                return (.unreachable, "unreachable: no route to host")
            default:
                return (.unreachable, "unreachable: \(error.description)")
            }
        case let error as ChannelError:
            if case .connectTimeout(let timeout) = error {
                return (.unreachable, "unreachable: no answer within \(timeout) (connection timed out)")
            }
            return (.other, "connection failed: \(error)")
        case let error as NIOSSLExtraError where error == .failedToValidateHostname:
            return (.tls, "TLS refused: the server's certificate does not name host \(url.host) (sslmode=verify-full "
                + "checks the name: connect by a host name the certificate carries, or use sslmode=verify-ca)")
        case let error where "\(error)".contains("CERTIFICATE_VERIFY_FAILED"):
            let trusted = url.sslRootCertificatePath.map { "the CA in sslrootcert=\($0)" }
                ?? "the system's CAs (give the server's CA with sslrootcert=PATH)"
            return (.tls, "TLS refused: the server's certificate is not signed by \(trusted)")
        case let error as NIOSSLError:
            return (.tls, "TLS handshake failed: \(error) (check sslmode and sslrootcert)")
        case let error as NIOSSLExtraError:
            return (.tls, "TLS handshake failed: \(error) (check sslmode and sslrootcert)")
        case let error as BoringSSLError:
            return (.tls, "TLS handshake failed: \(error) (check sslmode and sslrootcert)")
        default:
            return (.other, "\(error)")
        }
    }
}

/// Opens one connection to `url`; a failure is thrown as a ``ConnectionFailure`` that says where and why.
public func connectToDatabase(_ url: DatabaseURL, id: Int = 1, logger: Logger) async throws -> PostgresConnection {
    do {
        return try await PostgresConnection.connect(configuration: try url.connectionConfiguration(), id: id, logger: logger)
    } catch {
        throw ConnectionFailure(error, url: url)
    }
}
