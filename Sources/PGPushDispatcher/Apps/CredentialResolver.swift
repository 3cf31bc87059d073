import Foundation
import PGPushCore
#if canImport(Glibc)
import Glibc
#endif

/// Turns a key or certificate path from `push.apps` into a readable file path. With a credentials directory,
/// the path (relative paths are taken relative to it) must resolve, symlinks included, to a file inside it:
/// a row in the database can then never make the worker read arbitrary files.
public struct CredentialResolver: Sendable {
    public var directory: String?

    public init(directory: String?) {
        self.directory = directory
    }

    /// - Parameter column: The `push.apps` column the path came from, named in errors.
    public func resolve(_ path: String, column: String) throws(PGPushError) -> String {
        guard let directory else {
            guard FileManager.default.isReadableFile(atPath: path) else {
                throw PGPushError(.credentialUnreadable, "\(column) \(path) is not a readable file")
            }
            return path
        }
        guard let base = Self.realPath(directory) else {
            throw PGPushError(.invalidConfiguration, "credentials directory \(directory) does not exist")
        }
        let candidate = path.hasPrefix("/") ? path : base + "/" + path
        guard let resolved = Self.realPath(candidate) else {
            throw PGPushError(.credentialUnreadable, "\(column) \(path) does not exist inside the credentials directory")
        }
        guard resolved.hasPrefix(base.hasSuffix("/") ? base : base + "/") else {
            throw PGPushError(.credentialUnreadable, "\(column) \(path) resolves outside the credentials directory; refused")
        }
        guard FileManager.default.isReadableFile(atPath: resolved) else {
            throw PGPushError(.credentialUnreadable, "\(column) \(path) is not a readable file")
        }
        return resolved
    }

    /// Reads a credential file as text; the contents never appear in errors.
    public func read(_ path: String, column: String) throws(PGPushError) -> String {
        let resolved = try resolve(path, column: column)
        guard let data = FileManager.default.contents(atPath: resolved) else {
            throw PGPushError(.credentialUnreadable, "\(column) \(path) could not be read")
        }
        return String(decoding: data, as: UTF8.self)
    }

    static func realPath(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }
}
