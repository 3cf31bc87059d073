import ArgumentParser
import Foundation

/// A flag's value, else its `PGPUSH_*` environment variable, else the default. A malformed environment value is
/// a usage error naming the variable, never silently ignored.
func setting<T: ExpressibleByArgument>(_ flag: T?, _ variable: String) throws -> T? {
    if let flag { return flag }
    guard let raw = ProcessInfo.processInfo.environment[variable], !raw.isEmpty else { return nil }
    guard let value = T(argument: raw) else {
        throw ValidationError("\(variable)=\(raw) is not a valid value")
    }
    return value
}

extension Duration {
    static func seconds(_ value: Double) -> Duration {
        .milliseconds(Int64((value * 1000).rounded()))
    }
}
